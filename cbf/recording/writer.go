package recording

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/sprof/sprof/cbf"
)

// Defaults of Options.
const (
	DefaultFlushInterval = time.Second
	DefaultMaxBatchBytes = 1 << 20
)

// Options configure a Writer. The zero value is usable; a real recording
// fills in the Header fields.
type Options struct {
	// Host, Kernel, Arch and Frequency go to the header; see Header.
	Host, Kernel, Arch string
	Frequency          uint64
	// Start is the time sample times are measured from; zero means the
	// Clock's time when the Writer is made.
	Start time.Time
	// Clock tells the time for the flush rule; nil means time.Now. Tests
	// pass a fake clock so they need not sleep.
	Clock func() time.Time
	// FlushInterval is the longest a sample or process record stays in
	// memory before its chunk is written, provided the Writer is called
	// (Sample, Process, Tick) at least that often; 0 means
	// DefaultFlushInterval. It bounds what a crash loses.
	FlushInterval time.Duration
	// MaxBatchBytes makes the Writer complete a chunk when the pending
	// samples reach about this size, however recent the last chunk; 0
	// means DefaultMaxBatchBytes.
	MaxBatchBytes int
}

// ErrClosed is returned by a Writer's methods after Close.
var ErrClosed = errors.New("recording: writer closed")

// Writer writes a recording. It batches samples and process records and
// writes each batch as chunks with one Write call, so a crash loses at most
// the batch in memory and leaves the file readable up to the last chunk.
// A Writer is not safe for concurrent use.
type Writer struct {
	w         io.Writer
	opts      Options
	start     time.Time
	lastFlush time.Time
	err       error // sticky: the first write error, or ErrClosed

	procs      []byte // process records pending, without their count
	nprocs     int
	procBase   recordBase // the last pending record's time and pid
	containers []string   // the containers of the pending records
	jits       []byte     // JIT symbols pending, without their count
	njits      int
	jitBase    recordBase
	pys        []byte // Python frames pending, without their count
	npys       int
	pyBase     recordBase
	maps       mapDict
	cdict      containerDict
	stacks     *stackDict
	batch      batch
	offCPU     batch  // off-CPU records, for the next OffCPU chunk
	samples    uint64 // totals for the End chunk
	lost       uint64
	// tables is the Tables chunk's payload for the next flush: the
	// sizes of the tables as the chunks written so far leave them.
	tables  []byte
	out     []byte // the chunks being written
	scratch []byte // one payload being encoded
}

// NewWriter writes the magic and the header to w and returns a Writer for
// the rest. w should be unbuffered (an *os.File), so each completed chunk
// reaches the kernel at once.
func NewWriter(w io.Writer, opts Options) (*Writer, error) {
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = DefaultFlushInterval
	}
	if opts.MaxBatchBytes <= 0 {
		opts.MaxBatchBytes = DefaultMaxBatchBytes
	}
	now := opts.Clock()
	if opts.Start.IsZero() {
		opts.Start = now
	}
	wr := &Writer{w: w, opts: opts, start: opts.Start, lastFlush: now, stacks: newStackDict(),
		maps: newMapDict()}
	wr.batch.reset()
	wr.tables = wr.appendTables(nil)
	wr.offCPU.reset()
	h := Header{Version: Version, Start: opts.Start, Host: opts.Host, Kernel: opts.Kernel,
		Arch: opts.Arch, Frequency: opts.Frequency}
	wr.out = append(wr.out, Magic...)
	wr.out = appendChunk(wr.out, ChunkHeader, h.appendPayload(nil))
	if err := wr.write(); err != nil {
		return nil, err
	}
	return wr, nil
}

// Start returns the time sample times are measured from.
func (w *Writer) Start() time.Time { return w.start }

// Process records that process pid (named comm) has the images of m from
// time t on. Call it when a process is first seen and again whenever its
// mappings change (exec, dlopen), with the time of the first sample taken
// under the new mappings or earlier; a reader applies each record to the
// samples of pid from its time until the next record. m should have an
// empty platform: the header describes the host once.
func (w *Writer) Process(t time.Time, pid uint32, comm string, m *cbf.ImageMap) error {
	return w.ProcessInContainer(t, pid, comm, "", m)
}

// ProcessInContainer is Process for a process that runs in a container:
// container names it (a runtime's container ID); "" is unknown, as with
// Process. Names longer than MaxContainer bytes are cut.
func (w *Writer) ProcessInContainer(t time.Time, pid uint32, comm, container string, m *cbf.ImageMap) error {
	return w.addProcess(Process{Time: t.Sub(w.start), PID: pid, Comm: comm, Container: container, Map: m})
}

// Kernel records the image map of the kernel and its modules, which kernel
// stacks of every process refer to, from the start of the recording.
func (w *Writer) Kernel(m *cbf.ImageMap) error {
	return w.addProcess(Process{Kernel: true, Comm: "[kernel]", Map: m})
}

// Exit records that process pid is gone at time t, so a reader does not
// apply its image map to a later process that reuses the PID.
func (w *Writer) Exit(t time.Time, pid uint32) error {
	return w.addProcess(Process{Time: t.Sub(w.start), PID: pid, Exited: true})
}

func (w *Writer) addProcess(pr Process) error {
	if w.err != nil {
		return w.err
	}
	w.procs = pr.appendRecord(w.procs, &w.procBase, &w.maps)
	w.containers = append(w.containers, pr.Container)
	w.nprocs++
	return w.tick(w.opts.Clock())
}

// Sample adds one sample taken at t on cpu in thread tid of process pid,
// whose name was comm. user and kernel are the stacks as the walker
// returned them, leaf first (the leaf is an exact PC, the rest return
// addresses); either may be empty. flags marks truncated stacks; weight is
// what the sample counts for, normally 1.
func (w *Writer) Sample(t time.Time, pid, tid, cpu uint32, comm string, user, kernel []uint64, flags Flags, weight uint64) error {
	if w.err != nil {
		return w.err
	}
	w.samples++
	return w.add(&w.batch, t, pid, tid, cpu, comm, user, kernel, flags, weight)
}

// OffCPU adds an off-CPU record: thread tid ran again at t on cpu after
// waiting ns nanoseconds off the CPU with these stacks (see ChunkOffCPU).
func (w *Writer) OffCPU(t time.Time, pid, tid, cpu uint32, comm string, user, kernel []uint64, flags Flags, ns uint64) error {
	if w.err != nil {
		return w.err
	}
	if ns == 0 {
		return errors.New("recording: off-CPU record of 0 ns")
	}
	return w.add(&w.offCPU, t, pid, tid, cpu, comm, user, kernel, flags, ns)
}

func (w *Writer) add(b *batch, t time.Time, pid, tid, cpu uint32, comm string, user, kernel []uint64, flags Flags, weight uint64) error {
	k := groupKey{pid: pid, tid: tid, cpu: cpu, flags: flags, weight: weight}
	k.comm = b.comm(comm)
	k.user = w.stack(user, flags&UserTruncated != 0)
	k.kernel = w.stack(kernel, flags&KernelTruncated != 0)
	b.add(k, int64(t.Sub(w.start)))
	if w.batch.size()+w.offCPU.size()+len(w.stacks.pending) >= w.opts.MaxBatchBytes {
		return w.Flush()
	}
	return w.tick(w.opts.Clock())
}

// stack interns one stack in the recording's table and returns its
// reference: 0 for none, i+1 for stack i.
func (w *Writer) stack(pcs []uint64, truncated bool) uint32 {
	if len(pcs) == 0 && !truncated {
		return 0
	}
	return uint32(w.stacks.stack(pcs, truncated)) + 1
}

// Lost counts n samples that were lost (a full ring buffer, say); the next
// batch records them.
func (w *Writer) Lost(n uint64) {
	w.batch.lost += n
	w.lost += n
}

// Tick completes a chunk if there is anything pending and FlushInterval has
// passed since the last one. Sample and Process call it; a collector calls
// it also when idle, at least once a FlushInterval, so that nothing stays in
// memory longer.
func (w *Writer) Tick() error {
	if w.err != nil {
		return w.err
	}
	return w.tick(w.opts.Clock())
}

func (w *Writer) tick(now time.Time) error {
	if now.Sub(w.lastFlush) < w.opts.FlushInterval {
		return nil
	}
	return w.Flush()
}

// Flush writes the pending process records, stacks and samples as chunks
// now. Every chunk refers only to stacks of its own or earlier chunks, so a
// file cut after any chunk stays whole up to it.
func (w *Writer) Flush() error {
	if w.err != nil {
		return w.err
	}
	w.lastFlush = w.opts.Clock()
	defines := w.nprocs > 0 || len(w.stacks.entries) > w.stacks.defined
	if defines {
		// A reader that skipped a damaged chunk learns here what it
		// lost of the tables the chunks below refer to.
		w.out = appendChunk(w.out, ChunkTables, w.tables)
	}
	if w.nprocs > 0 {
		w.scratch = binary.AppendUvarint(w.scratch[:0], uint64(w.nprocs))
		w.scratch = append(w.scratch, w.procs...)
		w.scratch = w.cdict.appendContainers(w.scratch, w.containers)
		w.out = appendChunk(w.out, ChunkProcesses, w.scratch)
		w.procs, w.nprocs, w.containers, w.procBase = w.procs[:0], 0, w.containers[:0], recordBase{}
	}
	if w.njits > 0 {
		w.scratch = binary.AppendUvarint(w.scratch[:0], uint64(w.njits))
		w.scratch = append(w.scratch, w.jits...)
		w.out = appendChunk(w.out, ChunkJIT, w.scratch)
		w.jits, w.njits, w.jitBase = w.jits[:0], 0, recordBase{}
	}
	if w.npys > 0 {
		w.scratch = binary.AppendUvarint(w.scratch[:0], uint64(w.npys))
		w.scratch = append(w.scratch, w.pys...)
		w.out = appendChunk(w.out, ChunkPython, w.scratch)
		w.pys, w.npys, w.pyBase = w.pys[:0], 0, recordBase{}
	}
	if p, ok := w.stacks.appendPayload(w.scratch[:0]); ok {
		w.scratch = p
		w.out = appendChunk(w.out, ChunkStacks, w.scratch)
	}
	if len(w.batch.groups) > 0 || w.batch.lost > 0 {
		w.scratch = w.batch.appendPayload(w.scratch[:0])
		w.out = appendChunk(w.out, ChunkSamples, w.scratch)
		w.batch.reset()
	}
	if len(w.offCPU.groups) > 0 {
		w.scratch = w.offCPU.appendPayload(w.scratch[:0])
		w.out = appendChunk(w.out, ChunkOffCPU, w.scratch)
		w.offCPU.reset()
	}
	if len(w.stacks.words) > w.stacks.maxWords {
		w.stacks.reset()
	}
	if defines {
		w.tables = w.appendTables(w.tables[:0])
	}
	return w.write()
}

// appendTables appends a Tables chunk's payload: the number of maps,
// images, containers, stacks and stack words defined so far.
func (w *Writer) appendTables(dst []byte) []byte {
	for _, n := range []uint64{w.maps.nmaps, w.maps.nimages, w.cdict.n, uint64(len(w.stacks.entries)), uint64(len(w.stacks.words))} {
		dst = binary.AppendUvarint(dst, n)
	}
	return dst
}

// Close flushes what is pending and ends the recording with an End chunk.
// It does not close the underlying writer.
func (w *Writer) Close() error {
	if err := w.Flush(); err != nil {
		return err
	}
	e := End{Time: w.opts.Clock().Sub(w.start), Samples: w.samples, Lost: w.lost}
	w.out = appendChunk(w.out, ChunkEnd, e.appendPayload(nil))
	if err := w.write(); err != nil {
		return err
	}
	w.err = ErrClosed
	return nil
}

func (w *Writer) write() error {
	if len(w.out) == 0 {
		return nil
	}
	_, err := w.w.Write(w.out)
	w.out = w.out[:0]
	if err != nil {
		w.err = fmt.Errorf("recording: write: %w", err)
	}
	return w.err
}

// groupKey is what samples of one group share.
type groupKey struct {
	pid, tid, cpu, comm uint32
	user, kernel        uint32 // 0 none, i+1 stack i
	flags               Flags
	weight              uint64
}

type group struct {
	key   groupKey
	times []int64 // ns since the recording's start
}

// batch gathers the samples of the next Samples chunk, interning comms and
// grouping samples that differ only in time.
type batch struct {
	lost    uint64
	base    int64 // time of the batch's first sample
	comms   []string
	commIdx map[string]uint32
	groups  []group
	groupID map[groupKey]int
	order   []int // scratch: the order groups are written in
	nbytes  int   // estimate of the encoded size
}

func (b *batch) reset() {
	*b = batch{commIdx: b.commIdx, groupID: b.groupID, comms: b.comms[:0], groups: b.groups[:0], order: b.order}
	if b.commIdx == nil {
		b.commIdx, b.groupID = map[string]uint32{}, map[groupKey]int{}
	}
	clear(b.commIdx)
	clear(b.groupID)
}

func (b *batch) comm(s string) uint32 {
	if i, ok := b.commIdx[s]; ok {
		return i
	}
	i := uint32(len(b.comms))
	b.comms = append(b.comms, s)
	b.commIdx[s] = i
	b.nbytes += len(s) + 1
	return i
}

func (b *batch) add(k groupKey, t int64) {
	if len(b.groups) == 0 {
		b.base = t
	}
	i, ok := b.groupID[k]
	if !ok {
		i = len(b.groups)
		b.groups = append(b.groups, group{key: k})
		b.groupID[k] = i
		b.nbytes += 8
	}
	b.groups[i].times = append(b.groups[i].times, t)
	b.nbytes += 2
}

func (b *batch) size() int { return b.nbytes }

func (b *batch) appendPayload(dst []byte) []byte {
	// Groups go by cpu, then by time: one after the other, the samples of
	// a cpu are mostly of the same thread, so a group usually stores only
	// its stacks and its time, and the times only grow.
	b.order = b.order[:0]
	base := int64(math.MaxInt64)
	for i := range b.groups {
		g := &b.groups[i]
		slices.Sort(g.times)
		for j, t := range g.times {
			g.times[j] = micros(t)
		}
		base = min(base, g.times[0])
		b.order = append(b.order, i)
	}
	slices.SortFunc(b.order, func(i, j int) int {
		gi, gj := &b.groups[i], &b.groups[j]
		return cmp.Or(cmp.Compare(gi.key.cpu, gj.key.cpu), cmp.Compare(gi.times[0], gj.times[0]))
	})
	if len(b.groups) == 0 {
		base = micros(b.base)
	}
	dst = binary.AppendVarint(dst, base)
	dst = binary.AppendUvarint(dst, b.lost)
	dst = binary.AppendUvarint(dst, uint64(len(b.comms)))
	for _, c := range b.comms {
		dst = appendString(dst, c)
	}
	dst = binary.AppendUvarint(dst, uint64(len(b.groups)))
	prev := groupKey{user: 1, kernel: 1} // the first stacks are from entry 0
	prevFirst := base
	for _, i := range b.order {
		g := &b.groups[i]
		k := &g.key
		var head uint64
		set := func(bit uint64, on bool) {
			if on {
				head |= bit
			}
		}
		set(groupPID, k.pid != prev.pid)
		set(groupTID, k.tid != k.pid)
		set(groupComm, k.comm != prev.comm)
		set(groupUser, k.user != 0)
		set(groupKernel, k.kernel != 0)
		set(groupUserTrunc, k.flags&UserTruncated != 0)
		set(groupCount, len(g.times) > 1)
		set(groupCPU, k.cpu != prev.cpu)
		set(groupKernelTrunc, k.flags&KernelTruncated != 0)
		set(groupWeight, k.weight != 1)
		dst = binary.AppendUvarint(dst, head)
		if head&groupPID != 0 {
			dst = binary.AppendVarint(dst, int64(k.pid)-int64(prev.pid))
		}
		if head&groupTID != 0 {
			dst = binary.AppendVarint(dst, int64(k.tid)-int64(k.pid))
		}
		if head&groupCPU != 0 {
			dst = binary.AppendUvarint(dst, uint64(k.cpu))
			prevFirst = base
		}
		if head&groupComm != 0 {
			dst = binary.AppendUvarint(dst, uint64(k.comm))
		}
		// Stacks are references i+1 to entry i, 0 for none; stored as
		// entry differences, each from the last stack of its kind.
		user, kernel := prev.user, prev.kernel
		if k.user != 0 {
			dst = binary.AppendVarint(dst, int64(k.user)-int64(prev.user))
			user = k.user
		}
		if k.kernel != 0 {
			dst = binary.AppendVarint(dst, int64(k.kernel)-int64(prev.kernel))
			kernel = k.kernel
		}
		if head&groupWeight != 0 {
			dst = binary.AppendUvarint(dst, k.weight)
		}
		if head&groupCount != 0 {
			dst = binary.AppendUvarint(dst, uint64(len(g.times)))
		}
		t := prevFirst
		prevFirst = g.times[0]
		for _, v := range g.times {
			dst = binary.AppendUvarint(dst, uint64(v-t))
			t = v
		}
		prev = *k
		prev.user, prev.kernel = user, kernel
	}
	return dst
}
