package collector

import (
	"time"

	"github.com/sprof/sprof/stacks"
	"github.com/sprof/sprof/symbolize/cpython"
	"github.com/sprof/sprof/symbolize/jit"
)

// maxJITProcesses bounds the processes whose JIT files are read, each with
// a file or two kept open.
const maxJITProcesses = 256

// maxJITPending bounds the addresses of one process kept for a Sink while
// no symbol covers them yet (a JVM writes its perf map only when asked).
const maxJITPending = 4096

// JITSink is a Sink that also stores the JIT symbols its samples use, so
// that a recording names generated code where it is reported later. The
// collector tells it each symbol once per process, before or after the
// samples that use it (a JVM's perf map may be written late), at t, the
// time of the first sample found in it.
type JITSink interface {
	Sink
	JIT(t time.Time, pid uint32, sym *jit.Symbol) error
}

// jitProcesses reads the perf maps and jitdumps of the processes whose
// samples ran code in no mapped file, from the first such sample on, once
// per drain, while they run: the runtime appends to the files as it
// compiles, and may remove them when it exits.
type jitProcesses struct {
	procRoot string
	byPid    map[uint32]*jitProcess
}

// jitProcess is one process's JIT files and, for a Sink, what of them the
// recording has.
type jitProcess struct {
	img   *image
	files *jit.Process
	// told holds the symbols reported to the Sink, by index.
	told map[int]bool
	// pending holds addresses no symbol covered yet, with the time of
	// their first sample.
	pending map[uint64]uint64
}

func newJITProcesses(procRoot string) *jitProcesses {
	return &jitProcesses{procRoot: procRoot, byPid: map[uint32]*jitProcess{}}
}

// watch starts reading the JIT files of img's process, if it is not read
// yet. A pid now running another image starts over.
func (j *jitProcesses) watch(pid uint32, img *image) {
	p := j.byPid[pid]
	if p != nil && p.img == img {
		return
	}
	if p == nil && len(j.byPid) >= maxJITProcesses {
		return
	}
	if p != nil {
		p.files.Close()
	}
	p = &jitProcess{img: img, files: jit.NewProcess(j.procRoot, pid)}
	j.byPid[pid] = p
	p.update(j, pid)
}

// watchJITDump starts reading the JIT files of pid when f is a jitdump,
// at first sight of its mapping, while the process still runs: a runtime
// may write it out only when it exits (Node buffers 2 MiB), and it can be
// opened through the process only while the process lives.
func (c *Collector) watchJITDump(pid uint32, f *binaryFile) {
	if img := c.table.byPid[pid]; img != nil && jit.IsJITDump(f.name) {
		c.jit.watch(pid, img)
	}
}

// update reads what the process's files gained, after finding the
// jitdumps it maps: runtimes map theirs so that perf (and sprof) find it.
func (p *jitProcess) update(j *jitProcesses, pid uint32) {
	for _, m := range p.img.maps.maps {
		if jit.IsJITDump(m.bin.name) {
			// map_files opens what the process mapped, even in another mount
			// namespace; an error is kept by the Process and not retried.
			p.files.AddDump(j.mapFile(pid, &m), m.bin.name)
		}
	}
	p.files.Update()
}

func (j *jitProcesses) mapFile(pid uint32, m *mapping) string {
	return candidatePaths(j.procRoot, pid, m.start, m.limit, m.bin.name)[0]
}

// update reads every watched process's files.
func (j *jitProcesses) update() {
	for pid, p := range j.byPid {
		p.update(j, pid)
	}
}

// forget closes the files of processes the table no longer runs.
func (j *jitProcesses) forget(t *table) {
	for pid, p := range j.byPid {
		if t.byPid[pid] != p.img {
			p.files.Close()
			delete(j.byPid, pid)
		}
	}
}

func (j *jitProcesses) close() {
	for pid, p := range j.byPid {
		p.files.Close()
		delete(j.byPid, pid)
	}
}

// name is the Symbolizer of JIT locations: the frames of the symbol
// covering at in pid's generated code.
func (j *jitProcesses) name(pid uint32) func(dst []stacks.Frame, at uint64) []stacks.Frame {
	if p := j.byPid[pid]; p != nil {
		return p.files.Symbols.Frames
	}
	return func(dst []stacks.Frame, _ uint64) []stacks.Frame { return dst }
}

// tell reports to sink the symbols of the addresses of a sample of p's
// process, taken at t, that set does not map; those no symbol covers yet
// wait for a later update (see retell).
func (p *jitProcess) tell(sink JITSink, pid uint32, t uint64, wall func(uint64) time.Time, set *mapSet, user []uint64) error {
	for i, addr := range user {
		if set.find(addr) != nil || cpython.IsFrame(addr) {
			continue
		}
		if i > 0 {
			addr-- // a return address: look inside the call
		}
		if err := p.tellOne(sink, pid, t, wall, addr); err != nil {
			return err
		}
	}
	return nil
}

func (p *jitProcess) tellOne(sink JITSink, pid uint32, t uint64, wall func(uint64) time.Time, addr uint64) error {
	tab := &p.files.Symbols
	i := tab.Find(addr)
	if i < 0 {
		if p.pending == nil {
			p.pending = map[uint64]uint64{}
		}
		if _, ok := p.pending[addr]; !ok && len(p.pending) < maxJITPending {
			p.pending[addr] = t
		}
		return nil
	}
	if p.told[i] {
		return nil
	}
	if p.told == nil {
		p.told = map[int]bool{}
	}
	p.told[i] = true
	return sink.JIT(wall(t), pid, tab.Symbol(i))
}

// retell reports the symbols that now cover addresses that had none.
func (p *jitProcess) retell(sink JITSink, pid uint32, wall func(uint64) time.Time) error {
	for addr, t := range p.pending {
		if p.files.Symbols.Lookup(addr) == nil {
			continue
		}
		delete(p.pending, addr)
		if err := p.tellOne(sink, pid, t, wall, addr); err != nil {
			return err
		}
	}
	return nil
}
