package bpf

import (
	"errors"
	"fmt"
	"io"
	"math/bits"
	"os"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/sprof/sprof/internal/cpus"
)

// Config says what to sample and how often.
type Config struct {
	Frequency    int      // samples per second per CPU; 0 with OffCPU: off-CPU records only
	Pids         []uint32 // only these processes (tgids); empty = all
	FollowForks  bool     // add children of Pids as they are forked
	CgroupID     uint64   // cgroup v2 id (inode of its directory); 0 = any. Descendants match too.
	IncludeIdle  bool     // also sample the idle task (pid 0)
	User, Kernel bool     // which stacks to capture
	// RingBufferSize is the BPF ring's size in bytes, a power of two of
	// at least a page; 0 sizes it from Frequency × CPUs × record size
	// (see DefaultRingBufferSize).
	RingBufferSize int
	// Backlog bounds, in bytes, the records the Sampler moves out of the
	// ring into its own memory when the ring passes half full before the
	// caller drained it (see Ready); records beyond are lost and counted.
	// 0 means four seconds of records at the full rate, at least 4 MiB
	// and at most 256 MiB; negative means no backlog.
	Backlog int

	// StackCopy is how many bytes of the user stack above SP each sample of
	// a process marked by SetCopy carries in Sample.StackCopy, for user
	// space to unwind code built without frame pointers; 0 never copies.
	// The copy stops at the end of the thread's stack. At most
	// MaxStackCopy; needs User.
	//
	// Copies make the ring's memory traffic the sampler's main cost, so
	// with copies the default ring is small enough to stay in the caches
	// and callers drain it when Ready says so (see DefaultRingBufferSize).
	StackCopy int
	// CopyAll copies the stack of every process, marked or not: for hosts
	// where most code lacks frame pointers, and for tests.
	CopyAll bool
	// CopyPids are marked for stack copies before sampling starts, as
	// SetCopy marks processes later: the first samples of processes known
	// at Open carry copies too. Needs StackCopy.
	CopyPids []uint32

	// OffCPU also records where threads wait: each time a thread of the
	// selected processes runs again after at least OffCPUMin off the CPU
	// (blocked, sleeping or preempted), Read hands a Sample with OffCPU
	// set, its stacks those it left the CPU with. OffCPUMin 0 means
	// DefaultOffCPUMin.
	OffCPU    bool
	OffCPUMin time.Duration
	// OffCPUExitBudget bounds, in system call exits per second on the
	// busiest CPU, the rate at which the sys_exit hook that finishes
	// records of waits in system calls with their user stacks may run:
	// above it the hook goes off for a while, and such records carry the
	// user pc alone (OffCPUStats.Cut). 0 means DefaultOffCPUExitBudget;
	// negative means no budget, the hook always on.
	OffCPUExitBudget int
	// RunTimeStats turns on the kernel's BPF run-time statistics
	// (BPF_ENABLE_STATS) while the Sampler is open, for the run times in
	// Stats. They cost two clock reads per run of every BPF program on
	// the host, another 5% of a context-switch storm's throughput with
	// OffCPU on sprof's CI VM (BenchmarkOffCPU): leave them off unless
	// they are shown.
	RunTimeStats bool
	// UnwindTables is the kernel memory, in bytes, for unwind tables
	// that the program walks user stacks with (LoadTable, MapTable); 0
	// walks by frame pointers only, as before tables. At least 1 MiB;
	// DefaultUnwindTables fits a host's usual libraries.
	UnwindTables int64
	// Python has the samples of the processes given to SetPython carry
	// the Python frames of their threads (Sample.Python).
	Python bool
	// features, when set, replaces what ProbeFeatures finds: tests use it
	// to run the paths of older kernels on this one.
	features *Features
	// phaseTiming has the program time its phases into the phases map
	// (BenchmarkTableWalkPhases).
	phaseTiming bool
	// batchedSteps, when set, replaces returnThunks' answer for the
	// walks' steps a bpf_loop call (batched_steps in sprof.bpf.c): tests
	// load both ways.
	batchedSteps *bool
}

// MaxStackCopy is the largest Config.StackCopy, about perf's limit for
// --call-graph dwarf (65528): enough for the deepest stacks seen in
// practice, and each copied byte costs time in the sampling interrupt.
const MaxStackCopy = 1 << 16 // MAX_STACK_COPY

// Stats are the BPF program's run-time statistics since Open, and how its
// ring fared.
type Stats struct {
	// RunCount and RunTimeNs count every run, those the filters ended
	// early included; Sent counts the samples the runs put in the ring
	// (read, still waiting, or dropped at Close), so RunTimeNs / Sent is
	// the cost per sample.
	RunCount, RunTimeNs, Sent uint64
	// OffCPU are the off-CPU programs' figures (Config.OffCPU).
	OffCPU OffCPUStats
	// RingSize is the ring's size in bytes. Spilled counts the records
	// moved into the backlog because the ring passed half full before
	// the caller read it.
	RingSize int
	Spilled  uint64
}

const (
	// typicalRecordSize sizes the default ring: a header and ~115 frames,
	// plus the stack copy when there is one. Most records are smaller, a
	// few are up to 1152 frames plus the copy.
	typicalRecordSize = 1024
	// Without stack copies the default ring holds ringWindow of typical
	// records at the full rate, within these bounds (see
	// DefaultRingBufferSize). The default stays below maxDefaultRingSize,
	// locked kernel memory a production host should not lose unasked; a
	// larger ring must be asked for.
	ringWindow         = 250 * time.Millisecond
	minRingSize        = 256 << 10
	maxDefaultRingSize = 256 << 20
	maxRingSize        = 1 << 30
	// With stack copies the default ring holds copyRingWindow of records
	// at the full rate, within minRingSize and maxCopyRingSize.
	copyRingWindow  = 64 * time.Millisecond
	maxCopyRingSize = 8 << 20
	// The default backlog holds backlogWindow of records at the full
	// rate within these bounds: more than the default ring held before
	// there was a backlog (one to two seconds), as it costs memory only
	// while it is used.
	backlogWindow = 4 * time.Second
	minBacklog    = 4 << 20
	maxBacklog    = maxDefaultRingSize
)

// Sampler owns the loaded program, its maps and the perf events that run it.
// One goroutine reads; AddPid, SetCopy, Lost, Stats and Ready may be called
// from others meanwhile.
type Sampler struct {
	objs      objects
	features  *Features
	hooks     []link.Link // fork and exit hooks of the pid filter
	clocks    []*cpuClock
	reader    *ringbuf.Reader
	ringSize  int
	waiter    *waiter
	ready     chan struct{}
	stats     io.Closer
	statsErr  error     // why run-time statistics are off, if they are
	pids      *pidBytes // the pid filter, with Config.Pids
	marks     *pidBytes // what SetCopy, SetGo and SetPython marked
	stackCopy bool      // samples may carry stack copies (Config.StackCopy > 0)
	python    bool      // Config.Python
	offCPU    *offCPU
	tables    *tableSpace // with Config.UnwindTables

	// What Start needs of Load's Config, and whether it ran.
	online      []int
	frequency   int
	includeIdle bool
	started     bool

	// mu is held while the ring is read, by Read or by the waiter's spill.
	mu      sync.Mutex
	backlog backlog
	waitErr error // the waiter's first error, for Read to return
	rec     ringbuf.Record
	sample  Sample
}

// Open checks the host, loads the programs, fills the filters and starts
// sampling on every online CPU: Load, then Start. Errors about the host
// wrap ErrPermission, ErrNoBTF, ErrUnsupported or ErrFrequency.
func Open(cfg Config) (*Sampler, error) {
	s, err := Load(cfg)
	if err != nil {
		return nil, err
	}
	if err := s.Start(); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	return s, nil
}

// Load is Open up to the first sample: the programs and maps loaded, the
// filters filled, the fork and exit hooks attached and the ring ready to
// read, but no CPU sampled until Start. What the caller marks in between
// (SetCopy, SetPython, SetGo, the unwind tables) every sample has: marked
// after Start, a process's first samples lack what the marks are for (its
// Python frames, its goroutine, its stack copy). Its errors are Open's.
func Load(cfg Config) (*Sampler, error) {
	s, err := prepare(cfg)
	if err != nil {
		return nil, err
	}
	if err := s.attach(cfg); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	return s, nil
}

// ProbeLoad loads what Open would for cfg and unloads it, attaching and
// enabling nothing: nil when this kernel's verifier takes the programs.
// A verifier may refuse a program in one configuration and take it in
// another (Linux 6.1's refused the walk over unwind tables with Python
// frames on, and took it without), so sprof check asks it for the
// configuration sprof's commands open by default. Its errors are Open's.
func ProbeLoad(cfg Config) error {
	s, err := prepare(cfg)
	if err != nil {
		return err
	}
	return s.Close()
}

// prepare checks cfg and the host and loads the programs and maps of a
// Sampler for cfg, to sample the CPUs online now.
func prepare(cfg Config) (*Sampler, error) {
	if cfg.OffCPUMin < 0 {
		return nil, fmt.Errorf("bpf: negative OffCPUMin %v", cfg.OffCPUMin)
	}
	if !cfg.OffCPU || cfg.Frequency != 0 {
		if err := checkFrequency(cfg.Frequency); err != nil {
			return nil, err
		}
	}
	if !cfg.User && !cfg.Kernel {
		return nil, errors.New("bpf: Config captures neither user nor kernel stacks")
	}
	if cfg.FollowForks && len(cfg.Pids) == 0 {
		return nil, errors.New("bpf: FollowForks needs Pids to follow")
	}
	for _, pid := range cfg.Pids {
		if err := checkPid(pid); err != nil {
			return nil, fmt.Errorf("bpf: Pids: %w", err)
		}
	}
	if cfg.StackCopy < 0 || cfg.StackCopy > MaxStackCopy {
		return nil, fmt.Errorf("bpf: stack copy of %d bytes; the limit is %d", cfg.StackCopy, MaxStackCopy)
	}
	if cfg.StackCopy > 0 && !cfg.User {
		return nil, errors.New("bpf: StackCopy needs User stacks")
	}
	if (cfg.CopyAll || len(cfg.CopyPids) > 0) && cfg.StackCopy == 0 {
		return nil, errors.New("bpf: CopyAll and CopyPids need a StackCopy size")
	}
	if cfg.UnwindTables != 0 && (cfg.UnwindTables < minUnwindTables || cfg.UnwindTables > maxUnwindTables) {
		return nil, fmt.Errorf("bpf: UnwindTables of %d bytes; give %d to %d", cfg.UnwindTables, minUnwindTables, maxUnwindTables)
	}
	if cfg.UnwindTables != 0 && !cfg.User {
		return nil, errors.New("bpf: UnwindTables needs User stacks")
	}
	if err := CheckHost(); err != nil {
		return nil, err
	}
	online, err := cpus.Online()
	if err != nil {
		return nil, err
	}
	ringSize, err := ringBufferSize(cfg, len(online))
	if err != nil {
		return nil, err
	}

	s := &Sampler{stackCopy: cfg.StackCopy > 0, python: cfg.Python, ringSize: ringSize,
		ready: make(chan struct{}, 1), online: online, frequency: cfg.Frequency, includeIdle: cfg.IncludeIdle}
	s.backlog.max = backlogSize(cfg, len(online))
	s.features = cfg.features
	if s.features == nil {
		s.features = ProbeFeatures()
	}
	if err := s.load(cfg, ringSize); err != nil {
		return nil, err
	}
	return s, nil
}

func ringBufferSize(cfg Config, cpus int) (int, error) {
	if n := cfg.RingBufferSize; n != 0 {
		page := os.Getpagesize()
		if n < page || n&(n-1) != 0 || n > maxRingSize {
			return 0, fmt.Errorf("bpf: ring buffer size %d is not a power of two between %d and %d", n, page, maxRingSize)
		}
		return n, nil
	}
	hz := cfg.Frequency
	if cfg.OffCPU {
		// Off-CPU records come at most once per OffCPUMin per thread;
		// size the ring as for that many samples of one thread a CPU.
		hz += int(time.Second / max(cfg.OffCPUMin, DefaultOffCPUMin))
	}
	return DefaultRingBufferSize(hz, cpus, cfg.StackCopy), nil
}

// DefaultRingBufferSize is the ring's size for a RingBufferSize of 0: the
// bytes that hz samples a second on cpus CPUs write in a while, rounded up
// to a power of two, each sample a typical 1 KiB record plus stackCopy
// bytes.
//
// Without stack copies the while is ringWindow, 250 ms, between 256 KiB
// and 256 MiB. A ring of a second, as before, cost the program of a walk
// in the kernel (376-byte records) 1.6-2.0 µs per sample to write its
// record, against 1.2-1.4 µs in 256 KiB (0.7 s of those records) and
// 0.6-0.7 µs in 64 KiB (0.17 s), on a 2-CPU EPYC VM at 499 Hz
// (BenchmarkTableWalk, a 1 MiB ring before): the sooner a line is
// written again after the reader read it, the likelier a cache still
// holds it. Records without copies are small, so 250 ms of them at the
// full rate still outlasts several of the reader's wakeups.
//
// With stack copies it is copyRingWindow, 64 ms, between 256 KiB and
// 8 MiB. Writing a copy into ring memory that no cache holds is most of a
// sample's cost: BenchmarkStackCopyCost on a 2-CPU EPYC VM at 499 Hz put
// the copy at 9-27 µs per sample (8 and 16 KiB) with the ring of one
// second used before (16 and 32 MiB, read every 250 ms), and at 1-7 µs
// with this one, at load averages of 6-13. The smaller the ring, the
// cheaper (its lines are rewritten sooner after the reader touched them),
// but the less time it leaves: the program wakes the reader when the ring
// passes a quarter full (Ready), and a Sampler goroutine moves its
// records into user memory when it passes half full (Config.Backlog), so
// the ring overflows only if that goroutine sleeps through the second
// half. That is 32 ms or more when every CPU samples a copying process,
// longer at lower rates and for the shorter copies of shallow stacks: on
// 2 CPUs with 16 KiB copies, a 256 KiB ring at 99 Hz (38 ms) and 2 MiB at
// 499 Hz (60 ms). Stalls that long do happen on an overloaded host:
// host-wide 10 s recordings at 499 Hz under a load average of 7-27 lost
// samples in three runs of four with a 1 MiB ring (30 ms) and in three of
// twelve with 2 MiB (once after the whole sprof process stalled for over
// a second).
func DefaultRingBufferSize(hz, cpus, stackCopy int) int {
	perSecond := uint64(hz) * uint64(cpus) * uint64(typicalRecordSize+stackCopy)
	want, most := perSecond*uint64(ringWindow)/uint64(time.Second), uint64(maxDefaultRingSize)
	if stackCopy > 0 {
		want = perSecond * uint64(copyRingWindow) / uint64(time.Second)
		most = maxCopyRingSize
	}
	size := uint64(1) << bits.Len64(want-1)
	return int(min(max(size, minRingSize, uint64(os.Getpagesize())), most))
}

// backlogSize is Config.Backlog's meaning in bytes.
func backlogSize(cfg Config, cpus int) int {
	switch {
	case cfg.Backlog > 0:
		return cfg.Backlog
	case cfg.Backlog < 0:
		return 0
	}
	perSecond := uint64(cfg.Frequency) * uint64(cpus) * uint64(typicalRecordSize+cfg.StackCopy)
	return int(min(max(perSecond*uint64(backlogWindow/time.Second), minBacklog), maxBacklog))
}

func (s *Sampler) load(cfg Config, ringSize int) error {
	spec, err := loadSprof()
	if err != nil {
		return err
	}
	batched := returnThunks(vulnerabilitiesDir)
	if cfg.batchedSteps != nil {
		batched = *cfg.batchedSteps
	}
	for name, v := range map[string]any{
		"self_tgid":       uint32(os.Getpid()),
		"cgroup_id":       cfg.CgroupID,
		"filter_pids":     len(cfg.Pids) > 0,
		"follow_forks":    cfg.FollowForks,
		"include_idle":    cfg.IncludeIdle,
		"capture_user":    cfg.User,
		"capture_kernel":  cfg.Kernel,
		"stack_copy_size": uint32(cfg.StackCopy),
		"ring_size":       uint64(ringSize),
		"copy_all":        cfg.CopyAll,
		"python_enabled":  cfg.Python,
		"table_unwind":    cfg.UnwindTables > 0,
		"phase_timing":    cfg.phaseTiming,
		"batched_steps":   batched,

		"have_task_pt_regs":    s.features.Has(FeatureTaskPtRegs) && s.features.Has(FeatureCurrentTaskBTF),
		"have_ancestor_cgroup": s.features.Has(FeatureAncestorCgroupID),
	} {
		if err := spec.Variables[name].Set(v); err != nil {
			return fmt.Errorf("set BPF variable %s: %w", name, err)
		}
	}
	spec.Maps["samples"].MaxEntries = uint32(ringSize)
	if len(cfg.Pids) == 0 {
		spec.Maps["pids"].MaxEntries = 1 // not read
	}
	if cfg.Python {
		spec.Maps["py_named"].MaxEntries = maxPyNamed
	}
	// The scratch record: one per possible CPU, with room for the stack
	// copy after the largest fixed part. Its BTF type describes only the
	// fixed part, so it goes.
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return fmt.Errorf("count possible CPUs: %w", err)
	}
	scratch := spec.Maps["scratch"]
	scratch.MaxEntries = uint32(cpus)
	if cfg.StackCopy > 0 {
		scratch.ValueSize += uint32(cfg.StackCopy)
		scratch.Key, scratch.Value = nil, nil
	}
	if cfg.UnwindTables > 0 {
		rows, pages, rules := tableSizes(cfg.UnwindTables)
		for name, n := range map[string]uint32{"unwind_rows": rows, "unwind_pages": pages, "unwind_rules": rules} {
			spec.Maps[name].MaxEntries = n
			spec.Maps[name].Flags |= unix.BPF_F_MMAPABLE // written through a memory map (writeArray)
		}
		spec.Maps["unwind_tables"].MaxEntries = maxTables
		spec.Maps["unwind_maps"].MaxEntries = maxMapEntries
	}
	// One of the two sampling programs, as "sample": the other one is not
	// loaded, as a kernel without bpf_loop and bpf_find_vma rejects it.
	if !s.features.LoopWalk() {
		spec.Programs[sprofProgSample] = spec.Programs[sprofProgSampleCompat]
	}
	delete(spec.Programs, sprofProgSampleCompat)
	// Only the programs this path runs: the verifier's time is most of a
	// start's, and each program it need not check saves some.
	// sample_compat tail-calls walk_compat, and table_compat when it walks
	// tables; sample calls neither.
	var to any = &s.objs.sampleObjects
	switch {
	case s.features.LoopWalk():
	case cfg.UnwindTables > 0:
		to = &s.objs
	default:
		to = &struct {
			*sampleObjects
			*walkChunk
		}{&s.objs.sampleObjects, &s.objs.walkChunk}
	}
	if err := spec.LoadAndAssign(to, nil); err != nil {
		if errors.Is(err, unix.EPERM) {
			return fmt.Errorf("%w: the kernel refused to load the BPF program (%v); run sprof as root", ErrPermission, err)
		}
		return fmt.Errorf("load BPF program: %w", err)
	}
	if err := s.fill(cfg, ringSize, cpus); err != nil {
		return errors.Join(err, s.pids.close(), s.marks.close(), s.objs.Close())
	}
	return nil
}

// fill readies what load loaded: the tail calls, the filters and marks of
// cfg, and the off-CPU program.
func (s *Sampler) fill(cfg Config, ringSize, cpus int) error {
	if s.objs.WalkCompat != nil {
		if err := s.objs.WalkTail.Put(uint32(0), s.objs.WalkCompat); err != nil {
			return fmt.Errorf("install the walk's tail call: %w", err)
		}
	}
	if s.objs.TableCompat != nil {
		if err := s.objs.TableTail.Put(uint32(0), s.objs.TableCompat); err != nil {
			return fmt.Errorf("install the table walk's tail call: %w", err)
		}
	}
	if cfg.UnwindTables > 0 {
		s.tables = newTableSpace(&s.objs, cfg.UnwindTables)
	}
	var err error
	if s.marks, err = mapPidBytes(s.objs.PidMarks); err != nil {
		return err
	}
	if len(cfg.Pids) > 0 {
		if s.pids, err = mapPidBytes(s.objs.Pids); err != nil {
			return err
		}
		for _, pid := range cfg.Pids {
			if err := s.pids.add(pid); err != nil {
				return fmt.Errorf("add pid %d to the filter: %w", pid, err)
			}
		}
	}
	for _, pid := range cfg.CopyPids {
		if err := s.marks.mark(pid, markCopy, true); err != nil {
			return fmt.Errorf("mark pid %d for stack copies: %w", pid, err)
		}
	}
	if cfg.OffCPU {
		return s.loadOffCPU(cfg, ringSize, cpus)
	}
	return nil
}

// objects are what the Sampler loads of the BPF object: the sampling
// program the kernel's features chose, the hooks and the maps, and the
// chunks sample_compat tail-calls where it runs (nil elsewhere).
type objects struct {
	sampleObjects
	walkChunk
	tableChunk
}

// sampleObjects are the objects every path loads.
type sampleObjects struct {
	Sample     *ebpf.Program `ebpf:"sample"`
	FollowFork *ebpf.Program `ebpf:"follow_fork"`
	ForgetExit *ebpf.Program `ebpf:"forget_exit"`
	WakeOnExec *ebpf.Program `ebpf:"wake_on_exec"`
	sprofMaps
}

// walkChunk is tail-called by sample_compat's frame-pointer walk.
type walkChunk struct {
	WalkCompat *ebpf.Program `ebpf:"walk_compat"`
}

// tableChunk is tail-called by sample_compat's table walk.
type tableChunk struct {
	TableCompat *ebpf.Program `ebpf:"table_compat"`
}

func (o *objects) Close() error {
	var errs []error
	for _, p := range []*ebpf.Program{o.Sample, o.WalkCompat, o.TableCompat, o.FollowFork, o.ForgetExit, o.WakeOnExec} {
		if p != nil {
			errs = append(errs, p.Close())
		}
	}
	return errors.Join(append(errs, o.sprofMaps.Close())...)
}

// Limits says in one sentence what this kernel's missing features change,
// for the user to read once at start; "" on Linux 5.17 and newer.
func (s *Sampler) Limits() string { return s.features.Limits() }

// attach sets up what runs from Load on: the run-time statistics, the
// fork, exit and exec hooks (no fork after Load returns is missed) and the
// ring's reader and waiter (nothing is sampled before the ring can be
// read).
func (s *Sampler) attach(cfg Config) error {
	// BPF_ENABLE_STATS holds run-time statistics on while its fd is open and
	// drops them when sprof exits, unlike the kernel.bpf_stats_enabled sysctl.
	// It costs two clock reads per run.
	// Only CAP_SYS_ADMIN may turn them on: without it sampling works all
	// the same and Stats says why it has no figures.
	if !cfg.RunTimeStats {
		// Stats has counts only.
	} else if stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME); err != nil {
		s.statsErr = fmt.Errorf("BPF run-time statistics need CAP_SYS_ADMIN or sysctl kernel.bpf_stats_enabled=1: %w", err)
	} else {
		s.stats = stats
	}
	copyMarks := s.stackCopy && !cfg.CopyAll
	var hooks []*ebpf.Program
	if s.pids != nil || copyMarks {
		hooks = append(hooks, s.objs.ForgetExit)
		if cfg.FollowForks || copyMarks {
			hooks = append(hooks, s.objs.FollowFork)
		}
	}
	if cfg.User {
		// What the caller marks of a process (SetPython, SetGo, its
		// tables) is of its image: after an exec the caller should
		// look again soon.
		hooks = append(hooks, s.objs.WakeOnExec)
	}
	for _, p := range hooks {
		l, err := link.AttachTracing(link.TracingOptions{Program: p})
		if err != nil {
			return fmt.Errorf("attach %s: %w", p, err)
		}
		s.hooks = append(s.hooks, l)
	}
	reader, err := ringbuf.NewReader(s.objs.Samples)
	if err != nil {
		return fmt.Errorf("open BPF ring buffer: %w", err)
	}
	s.reader = reader
	// A deadline in the past makes reads return at once when the ring is
	// empty: the waiter, not the reader, sleeps until the program wakes it.
	s.reader.SetDeadline(time.Unix(1, 0))
	return s.startWaiter()
}

// Start starts sampling the CPUs that were online at Load, once: the
// cpu-clock events run the sampler, and with Config.OffCPU the off-CPU
// programs are attached.
func (s *Sampler) Start() error {
	if s.started {
		return errors.New("bpf: sampler started twice")
	}
	s.started = true
	if s.offCPU != nil {
		if err := s.offCPU.attach(); err != nil {
			return err
		}
	}
	for _, cpu := range s.online {
		if s.frequency == 0 {
			break
		}
		c, err := openCPUClock(cpu, s.frequency, s.includeIdle, s.objs.Sample)
		if err != nil {
			return err
		}
		s.clocks = append(s.clocks, c)
	}
	for _, c := range s.clocks {
		if err := c.enable(); err != nil {
			return err
		}
	}
	return nil
}

// Ready receives when the ring has passed a quarter full since the last
// Read, or was spilled into the backlog: the caller should Read soon. It
// never receives per sample. A caller that only reads on a timer may
// ignore it; records then wait in the backlog.
func (s *Sampler) Ready() <-chan struct{} { return s.ready }

// Read hands every record now in the backlog and the ring buffer to fn, in
// order, and returns how many it handed. It does not wait for records, and
// those written while it reads wait for the next Read (see drainRing). The
// *Sample and its slices are reused: valid only during fn.
func (s *Sampler) Read(fn func(*Sample)) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.waitErr; err != nil {
		s.waitErr = nil
		return 0, err
	}
	n, err := s.backlog.read(&s.sample, fn)
	if err != nil {
		return n, err
	}
	err = drainRing(s.reader, &s.rec, func(raw []byte) error {
		if err := s.sample.decode(raw); err != nil {
			return err
		}
		fn(&s.sample)
		n++
		return nil
	})
	return n, err
}

// AddPid adds a process to the pid filter, e.g. one started after Open.
// It fails with ErrNoPidFilter when the Sampler samples every process.
func (s *Sampler) AddPid(pid uint32) error {
	if s.pids == nil {
		return fmt.Errorf("add pid %d: %w (opened with an empty Config.Pids)", pid, ErrNoPidFilter)
	}
	if err := s.pids.add(pid); err != nil {
		return fmt.Errorf("add pid %d to the filter: %w", pid, err)
	}
	return nil
}

// SetCopy marks a process (tgid) for stack copies, or unmarks it: user
// space knows which processes map code that frame pointers cannot unwind,
// and only their samples pay for the copy. A process forked by a marked
// one is marked too (it has the same mappings until it execs; unmark it
// then if its new image needs no copies), and a mark goes when its process
// exits. It fails with
// ErrNoStackCopy when Config.StackCopy is 0; with CopyAll, marks change
// nothing.
func (s *Sampler) SetCopy(pid uint32, on bool) error {
	if !s.stackCopy {
		return fmt.Errorf("mark pid %d for stack copies: %w (opened with Config.StackCopy 0)", pid, ErrNoStackCopy)
	}
	if err := s.marks.mark(pid, markCopy, on); err != nil {
		return fmt.Errorf("set pid %d's stack-copy mark to %t: %w", pid, on, err)
	}
	return nil
}

// Lost returns how many samples found the ring buffer full, summed over
// CPUs, plus those that found the backlog full. They passed the filters
// and were dropped whole. With Config.OffCPU it includes the off-CPU
// records lost (OffCPUStats.Lost).
func (s *Sampler) Lost() (uint64, error) {
	n, err := sumPerCPU(s.objs.Lost)
	if err != nil {
		return 0, fmt.Errorf("read lost-sample counters: %w", err)
	}
	if s.offCPU != nil {
		st, err := s.offCPU.stats()
		if err != nil {
			return 0, err
		}
		n += st.Lost
	}
	return n + s.backlog.lost.Load(), nil
}

// sumPerCPU adds up a per-CPU array's single u64 counter.
func sumPerCPU(m *ebpf.Map) (uint64, error) {
	var perCPU []uint64
	if err := m.Lookup(uint32(0), &perCPU); err != nil {
		return 0, err
	}
	var sum uint64
	for _, n := range perCPU {
		sum += n
	}
	return sum, nil
}

// Stats returns how often the sampling program ran and for how long in
// total (BPF_ENABLE_STATS, held for the Sampler's lifetime with
// Config.RunTimeStats, else RunCount and RunTimeNs are 0), including runs
// the filters ended early.
func (s *Sampler) Stats() (Stats, error) {
	st, err := s.objs.Sample.Stats()
	if err != nil {
		return Stats{}, fmt.Errorf("read BPF program statistics: %w", err)
	}
	var off OffCPUStats
	if s.offCPU != nil {
		if off, err = s.offCPU.stats(); err != nil {
			return Stats{}, err
		}
	}
	if st.RunCount == 0 && off.Switches == 0 && s.statsErr != nil {
		return Stats{}, s.statsErr
	}
	sent, err := sumPerCPU(s.objs.Sent)
	if err != nil {
		return Stats{}, fmt.Errorf("read sent-sample counters: %w", err)
	}
	return Stats{RunCount: st.RunCount, RunTimeNs: uint64(st.Runtime), Sent: sent,
		RingSize: s.ringSize, Spilled: s.backlog.spilled.Load(), OffCPU: off}, nil
}

// Stop stops sampling: the CPU-clock events are disabled, so the program
// sends no more samples, and what it sent stays to be read. A recording
// stops as it ends, while a Read may be under way (Stop may be called
// then, but not twice at once): at high rates the program can write
// samples faster than user space aggregates them.
func (s *Sampler) Stop() error {
	var errs []error
	for _, c := range s.clocks {
		errs = append(errs, c.disable())
	}
	if s.offCPU != nil {
		errs = append(errs, s.offCPU.detach())
	}
	return errors.Join(errs...)
}

// Close stops sampling and frees everything Open set up. Read fails after
// it with an error wrapping os.ErrClosed.
func (s *Sampler) Close() error {
	var errs []error
	for _, c := range s.clocks {
		errs = append(errs, c.close())
	}
	for _, l := range s.hooks {
		errs = append(errs, l.Close())
	}
	if s.offCPU != nil {
		errs = append(errs, s.offCPU.close())
	}
	errs = append(errs, s.stopWaiter())
	if s.reader != nil {
		errs = append(errs, s.reader.Close())
	}
	if s.stats != nil {
		errs = append(errs, s.stats.Close())
	}
	errs = append(errs, s.pids.close(), s.marks.close(), s.objs.Close())
	// The closed reader stays: a Read after Close gets its os.ErrClosed.
	s.clocks, s.hooks, s.stats = nil, nil, nil
	return errors.Join(errs...)
}
