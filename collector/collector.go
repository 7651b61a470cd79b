package collector

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sprof/sprof/collector/perfring"
	"github.com/sprof/sprof/stacks"
	"github.com/sprof/sprof/stacks/locations"
	"github.com/sprof/sprof/symbolize"
	"github.com/sprof/sprof/symbolize/cpython"
	"github.com/sprof/sprof/unwind"
)

// DefaultInterval is how often Run drains the sampler and the side band:
// rare enough that waking up costs nothing measurable, often enough that
// the rings stay small.
const DefaultInterval = 250 * time.Millisecond

// Source is where samples come from: the BPF sampler, through an adapter
// (see collector/bpfsource), or a test's fake.
type Source interface {
	// Read calls fn for every sample waiting now, without blocking; the
	// *Sample and its slices are valid only during fn.
	Read(fn func(*Sample)) (int, error)
	// Lost is the number of samples dropped so far because the ring was
	// full.
	Lost() (uint64, error)
}

// A Notifier is a Source that asks to be drained before the next
// Interval: its ring is filling (bpf.Sampler.Ready). Run drains it then.
type Notifier interface {
	Ready() <-chan struct{}
}

// A Stopper is a Source that can stop producing samples and still be
// read. Run stops it as soon as the recording ends, while a drain may be
// reading it (Stop must allow that), and reads it once more: the last
// drain then ends even when the source produced samples faster than they
// were aggregated (high rates).
type Stopper interface {
	Stop() error
}

// Options configure a Collector.
type Options struct {
	// Frequency is the sampling frequency in Hz; it sets Profile.Period.
	// It is 0 when only off-CPU records come (OffCPU without CPU
	// sampling).
	Frequency int
	// OffCPU says the source also hands off-CPU records (Sample.OffCPU),
	// so profiles carry off-CPU time (stacks.Profile.OffCPU).
	OffCPU bool
	// Pids, when not empty, limits process tracking to these processes
	// and, with FollowForks, the children they start from now on. The
	// sampler filters samples itself; this keeps the process table small.
	Pids        []uint32
	FollowForks bool
	// Interval is how often Run drains; 0 means DefaultInterval.
	Interval time.Duration
	// Symbolizer resolves user addresses and Kernel kernel ones; either
	// may be nil, leaving those locations unsymbolized.
	Symbolizer symbolize.Symbolizer
	Kernel     locations.KernelSymbolizer
	// ProcRoot is where procfs is mounted; "" means /proc.
	ProcRoot string
	// NoSideband skips the perf tracking events and finds processes
	// through /proc alone, which misses processes that exit between two
	// drains.
	NoSideband bool
	// Sink, when not nil, receives every sample and process change as
	// they are drained, for a recording to symbolize later (see Sink).
	Sink Sink
	// SidebandPages is the size in pages of each CPU's side-band ring;
	// 0 means perfring.DefaultPages.
	SidebandPages int
	// StackCopy unwinds in userspace the samples that carry a copy of
	// their user stack, and marks the processes that need one through
	// the Source's CopyMarker (see unwind.go). UnwindCacheBytes bounds
	// the unwind tables kept (0 means DefaultUnwindCacheBytes);
	// DebugUnwind also counts the BPF walk's frames per binary, for
	// UnwindStats.
	StackCopy        bool
	UnwindCacheBytes int64
	DebugUnwind      bool
	// UnwindStore keeps the unwind tables built, by build ID, for the
	// next run to read instead of building them again; nil: none.
	UnwindStore *unwind.Store
	// KernelTables loads the unwind tables into a Source that is a
	// TableLoader, for the sampler to walk stacks over them in the
	// kernel, and describes each process's mappings to it (see
	// unwind_kernel.go). With StackCopy the copy stays the fallback for
	// code whose table is not loaded.
	KernelTables bool
	// Python finds the CPython processes among those sampled, has the
	// Source's PythonMarker record their Python frames, and splices those
	// into their stacks (see python.go).
	Python bool
}

// Stats describe a recording.
type Stats struct {
	Samples uint64
	// Lost counts samples the sampler dropped; SidebandLost mmap, exec
	// and exit records the kernel dropped, which can leave processes
	// unattributed.
	Lost, SidebandLost uint64
	// Processes is the number of processes that had samples (a pid
	// reused by a new process counts again, an exec does not); Stacks is
	// the number of distinct stacks.
	Processes, Stacks int
	Duration          time.Duration
	// Busy is the CPU time the collector spent draining, ordering and
	// aggregating; NsPerSample is Busy per sample, the userspace cost of
	// a sample. Build is the wall time spent building and symbolizing the
	// profile at the end.
	Busy        time.Duration
	NsPerSample float64
	Build       time.Duration
	// Sideband is nil when the perf tracking events work, else why not.
	Sideband error
	// SymbolizeErrors counts binaries the Symbolizer could not read.
	SymbolizeErrors int
	// Errors counts drains that met a malformed record or a read error
	// (Run goes on); Err is the first of them.
	Errors int
	Err    error
	// Python says how the Python frames of CPython processes fared
	// (Options.Python).
	Python PythonStats
}

// Collector turns raw samples into a profile. It is not safe for
// concurrent use.
type Collector struct {
	opts    Options
	table   *table
	tracker *perfring.Tracker
	agg     *aggregator
	unw     *unwinder // nil without Options.StackCopy and Options.KernelTables
	// kernelTables is Options.KernelTables.
	kernelTables bool
	py           *pythons // nil without Options.Python
	gos          goStacks
	jit          *jitProcesses
	self         uint32
	interval     time.Duration

	// Samples of the current drain, copied so they can be put in time
	// order with the side band: pend indexes stack words in arena.
	pend  []pending
	arena []uint64
	// events are side-band records not yet applied, in time order.
	events []event
	next   int // events[:next] are applied
	// The drain callbacks, bound once: a method value allocates.
	copySampleFn func(*Sample)
	copyRecordFn func(*perfring.Record)

	// sampled holds the processes (image.process) that had samples.
	sampled map[uint32]struct{}
	sink    *sinkState
	// continuous: intervals are cut (CutInterval), so held-back samples
	// are flushed by age, as with a Sink, rather than at the end.
	continuous bool
	start, end time.Time
	stats      Stats
}

// pending is a sample copied out of the sampler's ring.
type pending struct {
	time         uint64
	cpu          uint32
	key          stackKey
	user, kernel span
	copy         stackCopy
	offCPU       uint64 // Sample.OffCPU
	// python holds Sample.Python's words, pyTruncated its
	// PythonTruncated, pyFresh its PythonFresh; pyRead says the sample
	// has a Python part (the sampler read the Python frames, or tried).
	python      span
	pyTruncated bool
	pyFresh     bool
	pyRead      bool
	// tables is Sample.UserTables, goroutine Sample.Goroutine.
	tables, goroutine bool
}

// eventKind is what a side-band record changes in the process table.
type eventKind uint8

const (
	eventExec eventKind = iota + 1
	eventMmap
	eventFork
	eventExit
)

// event is a side-band record kept until the samples before it are in.
type event struct {
	time     uint64
	kind     eventKind
	pid, tid uint32
	ppid     uint32
	// An mmap's range, and the file it maps. The file is looked up only
	// when the record is applied: with Pids and FollowForks, whether pid
	// is tracked depends on a fork record that may be read after this one
	// (it was written on another CPU's ring).
	m       mapping
	file    string
	buildID []byte
	// anon: the mapping is executable memory of no file (JIT code).
	anon bool
}

// New makes a Collector: it opens the side band (unless NoSideband) and
// then reads every tracked process already running from /proc, in that
// order so no process falls in between. Open the sampler after New.
func New(opts Options) (*Collector, error) {
	if opts.Frequency < 0 || (opts.Frequency == 0 && !opts.OffCPU) {
		return nil, fmt.Errorf("collector: frequency %d Hz must be positive", opts.Frequency)
	}
	if opts.ProcRoot == "" {
		opts.ProcRoot = "/proc"
	}
	c := &Collector{
		opts:     opts,
		agg:      newAggregator(),
		sampled:  map[uint32]struct{}{},
		self:     uint32(os.Getpid()),
		interval: opts.Interval,
		start:    time.Now(),
		jit:      newJITProcesses(opts.ProcRoot),
	}
	c.copySampleFn, c.copyRecordFn = c.copySample, c.copyRecord
	c.sink = newSinkState(opts.Sink)
	if c.sink != nil {
		c.sink.jits = c.jit
	}
	if c.interval <= 0 {
		c.interval = DefaultInterval
	}
	// /proc is reread at most four times a second per process.
	c.table = newTable(opts.ProcRoot, opts.Pids, opts.FollowForks, uint64(time.Second/4))
	if opts.NoSideband {
		c.stats.Sideband = errors.New("disabled")
	} else if c.tracker, c.stats.Sideband = perfring.Open(opts.SidebandPages); c.stats.Sideband != nil {
		c.tracker = nil
	}
	if err := c.table.scan(); err != nil {
		c.Close()
		return nil, err
	}
	for pid, img := range c.table.byPid {
		for _, m := range img.maps.maps {
			c.watchJITDump(pid, m.bin)
		}
	}
	c.readGo()
	if opts.Python {
		c.py = newPythons(opts.ProcRoot)
		for pid, img := range c.table.byPid {
			c.py.consider(pid, img)
		}
	}
	c.kernelTables = opts.KernelTables
	if opts.StackCopy || opts.KernelTables {
		c.unw = newUnwinder(c.table.files, opts.UnwindCacheBytes, opts.DebugUnwind, opts.StackCopy, opts.UnwindStore)
		for pid, img := range c.table.byPid {
			c.unw.considerSet(pid, img.maps)
		}
	}
	return c, nil
}

// Close releases the side band and the files kept open for symbolization.
func (c *Collector) Close() error {
	if c.unw != nil {
		c.unw.builds.Close()
	}
	c.table.files.close()
	c.jit.close()
	if c.py != nil {
		c.py.close()
	}
	if c.tracker != nil {
		err := c.tracker.Close()
		c.tracker = nil
		return err
	}
	return nil
}

// Run drains src every Interval, and when src is a Notifier that is
// ready, until ctx is done or exited is closed (for a profiled command;
// nil if none), stops src if it is a Stopper, drains once more, and
// returns the profile (nil with a Sink) and the recording's statistics.
// Errors while draining are counted in Stats and do not stop the
// recording. It closes the Collector.
func (c *Collector) Run(ctx context.Context, src Source, exited <-chan struct{}) (*stacks.Profile, Stats, error) {
	iv, stats, err := c.RunInterval(ctx, src, exited)
	if err != nil || iv == nil {
		return nil, stats, err
	}
	p := iv.Resolve(context.Background())
	return p, iv.Stats, nil
}

// Attach tells src, once, what the collector knows of the processes
// running now and will tell it from then on: those whose stacks need
// copies, the mappings whose unwind tables the kernel walks, the CPython
// processes whose Python frames it reads, and the Go processes whose
// growing stacks it follows to the goroutine. A sample taken before gets
// none of these, so a caller attaches a source before it samples
// (pipeline.Open: bpf.Load, Attach, then bpf.Sampler.Start).
// Run and Drain attach the source they are given, if not done yet.
func (c *Collector) Attach(src Source) {
	if c.unw != nil {
		c.unw.attach(src)
		c.attachKernel(src)
	}
	if c.py != nil {
		c.py.attach(src)
	}
	c.attachGo(src)
}

// RunInterval is Run that leaves naming the frames to the caller
// (Interval.Resolve): a second Ctrl-C may cut that short. The Interval is
// nil with a Sink.
func (c *Collector) RunInterval(ctx context.Context, src Source, exited <-chan struct{}) (*Interval, Stats, error) {
	defer c.Close()
	c.start = time.Now()
	c.Attach(src) // now, not at the first drain
	tick := time.NewTicker(c.interval)
	defer tick.Stop()
	var ready <-chan struct{} // nil, never ready, unless src is a Notifier
	if n, ok := src.(Notifier); ok {
		ready = n.Ready()
	}
	built := c.TablesBuilt()
	stop := stopAtEnd(ctx, src, exited)
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-exited:
			break loop
		case <-tick.C:
			c.note(c.Drain(src))
		case <-ready:
			c.note(c.Drain(src))
		case <-built:
			c.note(c.Drain(src))
		}
	}
	stoppedAt, err := stop()
	c.note(err)
	c.note(c.drain(src, true))
	if !stoppedAt.IsZero() {
		c.end = stoppedAt // the samples end there, however long the drains took
	}
	c.settleHeld()
	lost, err := src.Lost()
	if err != nil {
		return nil, c.Stats(), fmt.Errorf("read lost sample count: %w", err)
	}
	c.stats.Lost = lost
	if c.sink != nil { // a recording, symbolized later: no profile now
		return nil, c.Stats(), nil
	}
	iv := c.unresolved()
	return iv, iv.Stats, nil
}

// TablesBuilt is signalled when unwind tables were built or read from
// the store since the last drain (nil without unwinding): a drain then
// takes them, and with Options.KernelTables loads them into the kernel,
// at once rather than at the next Interval (DefaultInterval: a quarter
// of a second), as a new compiler's samples are partial until its
// libraries' tables are in the kernel. RunInterval drains on it; a caller
// with a drain loop of its own should too.
func (c *Collector) TablesBuilt() <-chan struct{} {
	if c.unw == nil {
		return nil
	}
	return c.unw.builds.Finished()
}

// note counts a drain's error: a bad record must not cost the recording.
func (c *Collector) note(err error) {
	if err != nil {
		c.stats.Errors++
		if c.stats.Err == nil {
			c.stats.Err = err
		}
	}
}

// stopAtEnd stops src, if it is a Stopper, as soon as ctx is done or
// exited closes, from a goroutine of its own rather than between drains:
// on a host where samples come faster than they are aggregated, a drain
// can last many times the recording's length, and sampling would go on
// until it ends, past --duration, a signal or the command's exit. The
// function it returns stops src if that has not happened yet, ends the
// goroutine, and says when src was stopped (the zero time for a source
// that cannot stop).
func stopAtEnd(ctx context.Context, src Source, exited <-chan struct{}) func() (time.Time, error) {
	st, ok := src.(Stopper)
	if !ok {
		return func() (time.Time, error) { return time.Time{}, nil }
	}
	var (
		once sync.Once
		at   time.Time
		err  error
	)
	stop := func() {
		once.Do(func() {
			err = st.Stop()
			at = time.Now()
		})
	}
	ended := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			stop()
		case <-exited:
			stop()
		case <-ended:
		}
	}()
	return func() (time.Time, error) {
		close(ended)
		stop()
		return at, err
	}
}

// Drain reads the samples and side-band records waiting now and aggregates
// the samples, each under the process state at its time.
func (c *Collector) Drain(src Source) error { return c.drain(src, false) }

func (c *Collector) drain(src Source, final bool) error {
	// Busy is CPU time, not wall time: on a loaded host the wall clock
	// measures the other processes. The goroutine stays on its thread so
	// the thread's clock is the drain's.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	began := threadCPU()
	defer func() {
		c.end = time.Now()
		c.stats.Busy += threadCPU() - began
	}()
	c.pend, c.arena = c.pend[:0], c.arena[:0]
	if c.py != nil {
		c.py.drain++
	}
	c.Attach(src)
	if c.unw != nil {
		c.unw.stack = c.unw.stack[:0]
		c.releaseHeld(false, flushEnd)
	}
	// Samples first, then the side band: every record older than a
	// sample just read is then in the side band's rings too.
	// The samples copied before an error are still aggregated.
	var errs []error
	if _, err := src.Read(c.copySampleFn); err != nil {
		errs = append(errs, fmt.Errorf("read samples: %w", err))
	}
	cut := monotonicNow()
	if final {
		cut = ^uint64(0)
	}
	if c.tracker != nil {
		if _, err := c.tracker.Read(c.copyRecordFn); err != nil {
			errs = append(errs, fmt.Errorf("read side band: %w", err))
		}
		c.stats.SidebandLost = c.tracker.Lost()
	}
	// After the samples: what their code's runtime wrote before running it.
	c.jit.update()
	slices.SortStableFunc(c.events, func(a, b event) int { return cmp.Compare(a.time, b.time) })
	slices.SortStableFunc(c.pend, func(a, b pending) int { return cmp.Compare(a.time, b.time) })
	c.next = 0
	for i := range c.pend {
		p := &c.pend[i]
		c.applyUntil(p.time)
		c.add(p)
	}
	c.applyUntil(cut)
	// The records not applied yet wait for the next drain; held samples
	// let go before it (changesLater) see them from index 0.
	c.events, c.next = append(c.events[:0], c.events[c.next:]...), 0
	// Processes that exited leave the table once no sample has used them
	// for a while, so a long recording of a build does not keep every
	// compiler that ran; the stacks they left keep their mappings.
	if !final {
		c.table.prune(cut)
	}
	if c.sink != nil {
		errs = append(errs, c.sink.retellJIT(c.jit))
		c.sink.forget(c.sinkHorizon())
	}
	errs = append(errs, c.sink.tick())
	return errors.Join(errs...)
}

func threadCPU() time.Duration {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return time.Duration(ts.Nano())
}

func monotonicNow() uint64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

func (c *Collector) copySample(s *Sample) {
	p := pending{time: s.Time, cpu: s.CPU, key: stackKey{pid: s.Pid, tid: s.Tid, comm: s.Comm, truncated: s.UserTruncated}, offCPU: s.OffCPU}
	c.arena, p.user = appendSpan(c.arena, s.User)
	c.arena, p.kernel = appendSpan(c.arena, s.Kernel)
	c.arena, p.python = appendSpan(c.arena, s.Python)
	p.pyTruncated, p.pyFresh = s.PythonTruncated, s.PythonFresh
	p.pyRead = s.Python != nil
	p.tables = s.UserTables
	p.goroutine = s.Goroutine
	if c.unw != nil {
		p.copy = c.unw.keep(s)
	}
	c.pend = append(c.pend, p)
}

func (c *Collector) copyRecord(r *perfring.Record) {
	e := event{time: r.Time, pid: r.Pid, tid: r.Tid, ppid: r.PPid}
	switch r.Type {
	case perfring.RecordComm:
		if !r.IsExec() {
			return
		}
		e.kind = eventExec
	case perfring.RecordMmap2:
		e.kind = eventMmap
		name, _ := strings.CutSuffix(string(r.Filename), " (deleted)")
		if r.Prot&unix.PROT_EXEC == 0 {
			return
		}
		e.m = mapping{start: r.Addr, limit: r.Addr + r.Len, offset: r.Pgoff}
		if e.anon = !symbolizable(name); !e.anon {
			e.file, e.buildID = name, bytes.Clone(r.BuildID)
		}
	case perfring.RecordFork:
		e.kind = eventFork
	case perfring.RecordExit:
		e.kind = eventExit
	default:
		return
	}
	c.events = append(c.events, e)
}

// applyUntil applies the side-band records up to time t.
func (c *Collector) applyUntil(t uint64) {
	for ; c.next < len(c.events) && c.events[c.next].time <= t; c.next++ {
		c.apply(&c.events[c.next])
	}
}

// changesLater reports whether pid execs or exits after the records
// applied so far: /proc then shows a later program than the sample saw.
func (c *Collector) changesLater(pid uint32) bool {
	for _, e := range c.events[c.next:] {
		if e.pid == pid && (e.kind == eventExec || e.kind == eventExit) {
			return true
		}
	}
	return false
}

func (c *Collector) apply(e *event) {
	switch e.kind {
	case eventExec:
		c.table.exec(e.pid)
		c.forgetGo(e.pid)
		if c.py != nil {
			c.py.forget(e.pid)
		}
	case eventMmap:
		switch {
		case !c.table.tracked(e.pid):
		case e.anon:
			c.table.mmap(e.pid, e.m, true)
			if c.unw != nil {
				c.unw.kernelMapJIT(e.pid, codeRange{e.m.start, e.m.limit})
			}
		default:
			e.m.bin = c.table.files.fromMMap(e.pid, e.m.start, e.m.limit, e.file, e.buildID)
			c.table.mmap(e.pid, e.m, false)
			c.table.files.pin(e.pid, &e.m)
			c.watchJITDump(e.pid, e.m.bin)
			c.markGo(e.pid, &e.m)
			if c.unw != nil {
				c.unw.consider(e.pid, &e.m)
				c.unw.kernelMap(e.pid, &e.m)
			}
		}
	case eventFork:
		c.table.fork(e.pid, e.ppid)
		if img := c.table.byPid[e.pid]; c.unw != nil && img != nil && e.pid != e.ppid {
			c.unw.considerSet(e.pid, img.maps)
			c.unw.kernelSet(e.pid, img.maps)
		}
	case eventExit:
		c.table.exit(e.pid, e.tid, e.time)
		c.note(c.sink.exit(e))
		if c.unw != nil && e.pid == e.tid {
			c.unw.exited(e.pid)
			c.unw.kernelExited(e.pid)
		}
		if c.py != nil && e.pid == e.tid {
			c.py.forget(e.pid)
		}
		if e.pid == e.tid {
			c.forgetGo(e.pid)
		}
	}
}

// add aggregates one sample under its process's current mappings.
func (c *Collector) add(p *pending) {
	if p.key.pid == c.self {
		return
	}
	c.stats.Samples++
	user, kernel := p.user.of(c.arena), p.kernel.of(c.arena)
	img := c.table.forSample(p.key.pid, p.time)
	p.key.set = c.table.none
	if img != nil {
		p.key.set = img.setFor(user, kernel)
		c.table.settle(img)
	}
	if c.py != nil && img != nil && img.exited == 0 {
		c.py.consider(p.key.pid, img)
	}
	if img != nil && img.exited == 0 {
		c.considerGo(p.key.pid, p.key.set, user)
	}
	if c.unw != nil && img != nil {
		if img.exited == 0 {
			c.unw.considerSet(p.key.pid, img.maps)
			c.unw.kernelSet(p.key.pid, img.maps)
		}
		if p.tables {
			c.unw.countKernel(p.key.truncated)
		}
		if p.copy.n == 0 && (!p.tables || p.key.truncated) {
			c.unw.kernelDemand(p.key.pid, p.key.set, user)
		}
		if p.copy.n > 0 {
			var unwound bool
			if img, user, unwound = c.unwindSample(p, img, user); !unwound {
				return // held back until its table is built (unwind_hold.go)
			}
		} else if c.unw.debug {
			c.unw.countBPF(p.key.set, user)
		}
	}
	c.aggregate(p, img, c.splicePython(p, user, p.python.of(c.arena)), kernel)
}

// aggregate counts a sample's stacks, as add or the release of a held-back
// sample settled them, and hands it to the Sink.
func (c *Collector) aggregate(p *pending, img *image, user, kernel []uint64) {
	if c.sink != nil { // with the stacks and mappings aggregate settles on
		defer func() { c.note(c.sink.sample(p, user, kernel)) }()
	}
	if img != nil {
		p.key.container = img.container
	}
	h := c.agg.hash(&p.key, user, kernel)
	if i := c.agg.find(h, &p.key, user, kernel); i >= 0 {
		c.agg.entries[i].add(p.offCPU)
		return
	}
	// A new stack: make sure its addresses are known before keeping it,
	// that its walk ends where it leaves the process's code, and that it
	// is marked when it is not whole, and only then (stackEnd).
	if img != nil && p.key.set == img.maps && !covers(p.key.set, user) && c.stable(p.key.pid, img) {
		img = c.table.refresh(img, p.time)
		if p.key.set != img.maps {
			p.key.set, p.key.container = img.maps, img.container
			h = c.agg.hash(&p.key, user, kernel)
			if i := c.agg.find(h, &p.key, user, kernel); i >= 0 {
				c.agg.entries[i].add(p.offCPU)
				return
			}
		}
	}
	if p.key.truncated && c.unw != nil && c.unw.atRoot(p.key.set, user) {
		p.key.truncated = false // the walk stopped at the process's root
		h = c.agg.hash(&p.key, user, kernel)
		if i := c.agg.find(h, &p.key, user, kernel); i >= 0 {
			c.agg.entries[i].add(p.offCPU)
			return
		}
	}
	if n, truncated := c.stackEnd(p.key.pid, p.key.set, user, p.goroutine, p.key.truncated); n < len(user) || truncated != p.key.truncated {
		user, p.key.truncated = user[:n], truncated
		h = c.agg.hash(&p.key, user, kernel)
		if i := c.agg.find(h, &p.key, user, kernel); i >= 0 {
			c.agg.entries[i].add(p.offCPU)
			return
		}
	}
	if img != nil {
		c.sampled[img.process] = struct{}{}
		for _, addr := range user {
			if m := p.key.set.find(addr); m != nil {
				c.table.files.pin(p.key.pid, m)
			} else if !cpython.IsFrame(addr) {
				c.jit.watch(p.key.pid, img)
			}
		}
	}
	p.key.set.frozen = true
	c.agg.insert(h, &p.key, user, kernel, p.offCPU)
}

// covers reports whether every address lies in an executable mapping of
// s: when one does not, s may be missing a mapping made since it was read.
func covers(s *mapSet, addrs []uint64) bool {
	for _, a := range addrs {
		if !s.executable(a) && !cpython.IsFrame(a) {
			return false
		}
	}
	return true
}

// codeEnd returns how many frames of a user stack to keep: up to the first
// return address in no executable mapping of s. Such a value is data a
// frame-pointer walk read where no frame record was (g++ stacks showed
// 0x8000000001), and the walk went wrong there: the stack is cut and
// marked truncated, as the userspace unwinder's Unmapped stop does. A
// return address is looked up at the call before it. When s maps nothing,
// or not even the sampled PC, s is not known well enough to judge, and the
// stack is kept whole. Python frames spliced in (python.go) are no code
// addresses and are passed over.
func codeEnd(s *mapSet, user []uint64) int {
	pc := true // the next native address is the sampled PC
	for i, addr := range user {
		switch {
		case cpython.IsFrame(addr):
		case pc:
			if !s.executable(addr) {
				return len(user)
			}
			pc = false
		case addr == 0 || !s.executable(addr-1):
			return i
		}
	}
	return len(user)
}

// Stats returns the statistics so far.
func (c *Collector) Stats() Stats {
	s := c.stats
	s.Stacks = len(c.agg.entries)
	s.Processes = len(c.sampled)
	if c.py != nil {
		s.Python = c.py.stats
	}
	s.Duration = c.end.Sub(c.start)
	if s.Samples > 0 {
		s.NsPerSample = float64(s.Busy.Nanoseconds()) / float64(s.Samples)
	}
	return s
}
