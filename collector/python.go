package collector

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/sprof/sprof/stacks"
	"github.com/sprof/sprof/symbolize/cpython"
)

// PythonMarker is implemented by a Source whose sampler records the Python
// frames of the processes it is told of (collector/bpfsource does, over
// bpf.Sampler.SetPython); a nil p unmarks pid.
type PythonMarker interface {
	SetPython(pid uint32, p *cpython.Process) error
}

// PythonNamer is implemented by a PythonMarker whose sampler wakes the
// collector when a Python process runs a code object not named yet, so that
// it is named while the process runs (collector/bpfsource does, over
// bpf.Sampler.PythonNamed). The sampler marks such a sample
// (Sample.PythonFresh), and the collector tells it the innermost frame's
// code object once it has read it, or tried to: at most once a drain, and
// again in a later drain if a sample is marked again (the sampler forgot
// it, or the sample was taken before it was told).
type PythonNamer interface {
	PythonNamed(pid uint32, code uint64) error
}

// PythonSink is a Sink that also stores the names of the Python frames its
// samples use, so that a recording names them where it is reported later.
// The collector tells it each frame's name once per process, before the
// first sample that uses it; addr is the frame's address in the spliced
// user stacks the Sink receives (cpython.FrameTag set).
type PythonSink interface {
	Sink
	Python(t time.Time, pid uint32, addr uint64, f cpython.Frame) error
}

// Bounds of what the collector keeps for Python processes.
const (
	// maxPythonProcesses bounds the Python processes read at once, each
	// with /proc/PID/mem kept open.
	maxPythonProcesses = 1024
	// maxPythonGone bounds the processes that exited whose frame names
	// are kept for the profile being built.
	maxPythonGone = 4096
	// maxPythonNames bounds the frames named per process.
	maxPythonNames = 1 << 18
)

// pythons finds the Python processes among those sampled, has the sampler
// record their Python frames, and splices those frames into their native
// stacks, named while the process lives.
type pythons struct {
	procRoot string
	marker   PythonMarker
	namer    PythonNamer
	attached bool
	toMark   []uint32
	byPid    map[uint32]*pythonProcess
	// gone holds processes that exited or exec'd, whose names the profile
	// being built may still need; cleared each interval.
	gone []goneProcess
	// considered holds the mappings last examined per process.
	considered map[uint32]*mapSet
	frames     []cpython.Sampled
	spliced    []uint64
	// drain counts the collector's drains, for told.
	drain uint64
	stats PythonStats
}

// PythonStats say how the Python frames fared.
type PythonStats struct {
	// Processes counts the Python processes found; Samples the samples
	// with Python frames spliced in, Truncated those whose Python chain
	// was cut short, and Unnamed the frames whose code object could not
	// be read. Unread counts the samples marked truncated because they
	// ran Python code whose frames were not read: taken before the
	// process was marked (it exec'd an interpreter or mapped libpython
	// since the last drain), the mark failed (see Err), or the sampler
	// found no Python frame for a thread in the evaluator (one of more
	// threads than it looks through, or of a subinterpreter).
	Processes, Samples, Truncated, Unnamed, Unread int
	// Err is the first reason a process that maps an interpreter gets no
	// Python frames (an unsupported version, an unreadable file).
	Err error
}

type pythonProcess struct {
	img    *image
	proc   *cpython.Process
	mem    *os.File
	reader *cpython.Reader
	names  map[uint64]cpython.Frame
	// told holds the drain in which each code object was last told to
	// the namer.
	told map[uint64]uint64
}

type goneProcess struct {
	pid   uint32
	names map[uint64]cpython.Frame
}

func newPythons(procRoot string) *pythons {
	return &pythons{procRoot: procRoot, byPid: map[uint32]*pythonProcess{}, considered: map[uint32]*mapSet{}}
}

// consider looks for a CPython interpreter among the mappings of img, the
// image of process pid, once per mapping set.
func (py *pythons) consider(pid uint32, img *image) {
	set := img.maps
	if py.considered[pid] == set {
		return
	}
	py.considered[pid] = set
	if pp := py.byPid[pid]; pp != nil && pp.img == img {
		return
	}
	maps := make([]cpython.Mapping, 0, len(set.maps))
	found := false
	for _, m := range set.maps {
		if _, ok := cpython.Interpreter(m.bin.name); ok {
			found = true
		}
		maps = append(maps, cpython.Mapping{Start: m.start, Limit: m.limit, Offset: m.offset, Path: m.bin.name})
	}
	if !found || len(py.byPid) >= maxPythonProcesses {
		return
	}
	py.forget(pid)
	proc, err := cpython.Detect(py.procRoot, pid, maps)
	var mem *os.File
	if err == nil {
		mem, err = os.Open(filepath.Join(py.procRoot, strconv.Itoa(int(pid)), "mem"))
	}
	if err != nil {
		// A python3.X executable that loads libpython is no
		// interpreter until the library is mapped; a process gone is no
		// news.
		if py.stats.Err == nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, cpython.ErrNotPython) {
			py.stats.Err = fmt.Errorf("pid %d: %w", pid, err)
		}
		return
	}
	py.stats.Processes++
	py.byPid[pid] = &pythonProcess{img: img, proc: proc, mem: mem, reader: cpython.NewReader(mem, proc),
		names: map[uint64]cpython.Frame{}, told: map[uint64]uint64{}}
	py.mark(pid, proc)
}

// attach marks processes through src from now on, and sends the marks
// made before src was known.
func (py *pythons) attach(src Source) {
	if py.attached {
		return
	}
	py.attached = true
	py.marker, _ = src.(PythonMarker)
	py.namer, _ = src.(PythonNamer)
	for _, pid := range py.toMark {
		if pp := py.byPid[pid]; pp != nil {
			py.mark(pid, pp.proc)
		}
	}
	py.toMark = nil
}

func (py *pythons) mark(pid uint32, p *cpython.Process) {
	switch {
	case py.marker != nil:
		if err := py.marker.SetPython(pid, p); err != nil && py.stats.Err == nil {
			py.stats.Err = err
		}
	case !py.attached && p != nil:
		py.toMark = append(py.toMark, pid)
	}
}

// forget stops reading process pid, which exited or exec'd, keeping the
// names of its frames for the profile being built.
func (py *pythons) forget(pid uint32) {
	delete(py.considered, pid)
	pp := py.byPid[pid]
	if pp == nil {
		return
	}
	delete(py.byPid, pid)
	pp.mem.Close()
	py.mark(pid, nil)
	if len(py.gone) < maxPythonGone {
		py.gone = append(py.gone, goneProcess{pid, pp.names})
	}
}

// nextInterval drops the names of processes gone.
func (py *pythons) nextInterval() { py.gone = nil }

func (py *pythons) close() {
	for pid := range py.byPid {
		py.forget(pid)
	}
	py.gone = nil
}

// name returns the Symbolizer of the Python frames of process pid.
func (py *pythons) name(pid uint32, addr uint64) func(dst []stacks.Frame, _ uint64) []stacks.Frame {
	return func(dst []stacks.Frame, _ uint64) []stacks.Frame {
		f, ok := py.lookup(pid, addr)
		if !ok {
			return dst
		}
		return append(dst, stacks.Frame{Function: f.Function, File: f.File, Line: f.Line})
	}
}

func (py *pythons) lookup(pid uint32, addr uint64) (cpython.Frame, bool) {
	if pp := py.byPid[pid]; pp != nil {
		if f, ok := pp.names[addr]; ok {
			return f, true
		}
	}
	for i := len(py.gone) - 1; i >= 0; i-- {
		if g := &py.gone[i]; g.pid == pid {
			if f, ok := g.names[addr]; ok {
				return f, true
			}
		}
	}
	return cpython.Frame{}, false
}

// tell tells the namer that code object code of process pid, which a
// sample marked fresh, was read or tried, unless it did so in this drain
// already: a code object that cannot be read would otherwise wake the
// collector as often as the sampler may. With told full it tells at each
// such sample, a system call each, rather than leave the code object
// waking the collector.
func (py *pythons) tell(pid uint32, pp *pythonProcess, code uint64) {
	if py.namer == nil {
		return
	}
	at, ok := pp.told[code]
	if ok && at == py.drain {
		return
	}
	if ok || len(pp.told) < maxPythonNames {
		pp.told[code] = py.drain
	}
	if err := py.namer.PythonNamed(pid, code); err != nil && py.stats.Err == nil {
		py.stats.Err = err
	}
}

// splice returns the user stack of p, a sample of a Python process whose
// sampler recorded the Python frames words (bpf.Sample.Python), with those
// frames spliced in and named; user itself for other samples. The result
// is valid until the next call. Names new to the Sink are told to it.
func (c *Collector) splicePython(p *pending, user, words []uint64) []uint64 {
	py := c.py
	if py == nil {
		return user
	}
	pp := py.byPid[p.key.pid]
	if pp == nil {
		return user
	}
	if !p.pyRead || (len(words) == 0 && !p.pyTruncated) {
		// No Python part, or the sampler found no Python frame for
		// the thread (no thread state among the first PY_MAX_THREADS,
		// none current): whole for a thread that runs no Python code,
		// but one in the evaluator ran some. Off-CPU samples never
		// carry Python frames: their native stack is all there is.
		if p.offCPU == 0 && pp.proc.Evaluates(user) {
			py.stats.Unread++
			p.key.truncated = true // its Python frames are missing
		}
		return user
	}
	py.stats.Samples++
	if p.pyTruncated {
		py.stats.Truncated++
		p.key.truncated = true // never shown as whole
	}
	py.frames = py.frames[:0]
	for i := 0; i+1 < len(words); i += 2 {
		f := pp.reader.Locate(cpython.Sampled{Code: words[i], Instr: words[i+1]})
		py.frames = append(py.frames, f)
		addr := f.Addr()
		if _, ok := pp.names[addr]; ok || len(pp.names) >= maxPythonNames {
			continue
		}
		name, ok := pp.reader.Frame(f.CodeAddr(), f.Instr)
		if !ok {
			py.stats.Unnamed++
			continue // not a code object: the frame stays unnamed
		}
		pp.names[addr] = name
		if s, ok := c.sink.pythonSink(); ok {
			c.note(s.Python(c.sink.time(p.time), p.key.pid, addr, name))
		}
	}
	if p.pyFresh && len(py.frames) > 0 {
		py.tell(p.key.pid, pp, py.frames[0].CodeAddr())
	}
	py.spliced = pp.proc.Splice(py.spliced[:0], user, py.frames)
	return py.spliced
}
