package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/sprof/sprof/bpf"
	"github.com/sprof/sprof/collector"
	"github.com/sprof/sprof/collector/bpfsource"
	"github.com/sprof/sprof/stacks"
	"github.com/sprof/sprof/symbolize"
	"github.com/sprof/sprof/unwind"
)

// DefaultStackCopy is the user stack copied per sample of a process whose
// code may lack frame pointers: deep enough for the stacks of C, C++ and
// Rust programs seen in practice (perf's --call-graph dwarf copies 8 KiB).
const DefaultStackCopy = 16 << 10

// Unwind says where the user stacks of code without frame pointers are
// unwound.
type Unwind uint8

const (
	// UnwindCopy: the sampler copies the top of the stack
	// (Config.StackCopy bytes) and the collector unwinds the copy with
	// the binaries' .sframe or .eh_frame; deeper frames are lost.
	UnwindCopy Unwind = iota
	// UnwindBPF: the sampler walks the real stack in the kernel over the
	// binaries' unwind tables, loaded into Config.UnwindTables bytes of
	// kernel memory once per binary: whole stacks at any depth (1,024
	// frames), no copies; a binary's frames end the stack, marked
	// truncated, until its table is loaded.
	UnwindBPF
	// UnwindAuto: in the kernel where tables are loaded, with the copy
	// as the fallback until they are (or where they cannot be).
	UnwindAuto
)

var unwindNames = [...]string{UnwindCopy: "copy", UnwindBPF: "bpf", UnwindAuto: "auto"}

func (u Unwind) String() string {
	if int(u) < len(unwindNames) {
		return unwindNames[u]
	}
	return fmt.Sprintf("Unwind(%d)", uint8(u))
}

// ParseUnwind returns the Unwind named s: copy, bpf or auto.
func ParseUnwind(s string) (Unwind, error) {
	for u, name := range unwindNames {
		if s == name {
			return Unwind(u), nil
		}
	}
	return 0, fmt.Errorf("unwind %q: want copy, bpf or auto", s)
}

// Config says what to sample and how to name it; both commands fill it
// from the same flags.
type Config struct {
	// Frequency is samples per second per CPU.
	Frequency int
	// Pids, when not empty, are the only processes sampled. Command says
	// they are a command sprof started: their children are followed and
	// every one of their stacks is copied (a command's processes are
	// marked only once their mappings are read, after they start).
	Pids    []uint32
	Command bool
	// CgroupID, when not 0, limits sampling to a cgroup v2 and its
	// descendants.
	CgroupID uint64
	// IncludeIdle also samples the idle task (pid 0).
	IncludeIdle bool
	// User and Kernel select the stacks; at least one must be set.
	User, Kernel bool
	// OffCPU also records where threads wait off the CPU, for waits of
	// OffCPUMin or more (0: bpf.DefaultOffCPUMin); profiles then carry
	// the off_cpu/nanoseconds sample type. Frequency 0 records off-CPU
	// waits alone.
	OffCPU    bool
	OffCPUMin time.Duration
	// OffCPUBudget bounds the system calls a second, on the busiest CPU,
	// whose exits the hook that reads the user stacks of waits in system
	// calls may follow (bpf.Config.OffCPUExitBudget): 0 means
	// bpf.DefaultOffCPUExitBudget, negative no bound.
	OffCPUBudget int
	// RunTimeStats turns on the kernel's BPF run-time statistics for
	// SamplerStats' run times (bpf.Config.RunTimeStats); they cost every
	// BPF program on the host two clock reads per run.
	RunTimeStats bool
	// RingBufferSize is the BPF ring's size, a power of two; 0 lets the
	// sampler size it (bpf.DefaultRingBufferSize).
	RingBufferSize int
	// StackCopy is how many bytes of user stack are copied per sample of
	// a process with code that may lack frame pointers, for the
	// userspace unwinder (.sframe, .eh_frame); 0 walks frame pointers
	// only. Ignored without User.
	StackCopy int
	// UnwindCache bounds the memory of the unwind tables kept; 0 means
	// collector.DefaultUnwindCacheBytes.
	UnwindCache int64
	// UnwindStore keeps built unwind tables for later runs; nil: none.
	UnwindStore *unwind.Store
	// Unwind says where stacks without frame pointers are unwound;
	// UnwindBPF ignores StackCopy. UnwindTables is the kernel memory
	// for tables with UnwindBPF and UnwindAuto; 0 means
	// bpf.DefaultUnwindTables.
	Unwind       Unwind
	UnwindTables int64
	// Python reads the Python frames of CPython 3.9 to 3.13 processes and
	// splices them into their stacks (package symbolize/cpython).
	Python bool
	// DebugUnwind counts the unwinder's frames per binary and method,
	// for UnwindStats.
	DebugUnwind bool
	// Symbolizer names user frames; nil leaves them unnamed. A
	// long-lived Pipeline needs one whose caches are bounded.
	Symbolizer symbolize.Symbolizer
	// Sink, when not nil, receives every sample as it is drained, for a
	// recording: Run then returns no profile.
	Sink collector.Sink
}

// Pipeline is a sampler feeding a collector. Open one, then either Run it
// to its end (record) or Drain and Cut it until Close (agent), on one
// goroutine; Interval.Resolve may run on another.
type Pipeline struct {
	cfg     Config
	col     *collector.Collector
	sampler *bpf.Sampler
	src     *bpfsource.Source
	// KernelErr says why kernel frames stay unnamed (no access to
	// /proc/kallsyms), nil when they are named.
	KernelErr error
	// Limits says in one sentence what this kernel cannot do that a newer
	// one can (bpf.Sampler.Limits), "" when nothing: record and agent say
	// it once at start, as a fact rather than a failure.
	Limits string
	// TablesErr says why UnwindAuto fell back to UnwindCopy: a kernel
	// before 5.17, or a sampler that could not be opened with unwind
	// tables and could without (kernel memory for the tables refused,
	// say); nil when it did not.
	TablesErr error
	// bpfStats and bpfErr are the sampler's statistics at the end of Run.
	bpfStats bpf.Stats
	bpfErr   error
	// stopped: Run closed the sampler already; tables is what the
	// sampler said of its unwind tables then.
	stopped bool
	tables  *collector.KernelTableStats
}

// Open opens the collector and then the sampler, in that order so that
// no process starts unseen in between, and marks the running processes
// that need stack copies before the first sample, and those it treats
// apart otherwise (collector.Attach) right after it. With UnwindAuto, a
// sampler that cannot be opened with unwind tables, or on a kernel before
// 5.17, is opened without them, UnwindCopy, and TablesErr says why.
func Open(cfg Config) (*Pipeline, error) {
	var why error // why auto copies
	if cfg.Unwind == UnwindAuto && cfg.User {
		if fs := bpf.ProbeFeatures(); !fs.LoopWalk() {
			// The walk over tables runs there too (UnwindBPF), in
			// tail calls of 32 frames, but its two programs are
			// 360,000 instructions to verify at every start.
			why = fmt.Errorf("kernel %s has no bpf_loop (Linux 5.17), which auto waits for (--unwind bpf walks stacks over tables there too)", fs.Release)
		} else if p, err := open(cfg); err == nil {
			return p, nil
		} else {
			// Stacks are still whole where frame pointers or the
			// copy reach: a host that cannot give the tables their
			// memory is still profiled.
			why = err
		}
	}
	if why == nil {
		return open(cfg)
	}
	cfg.Unwind = UnwindCopy
	p, err := open(cfg)
	if err != nil {
		return nil, err
	}
	p.TablesErr = why
	return p, nil
}

// ProbeSampler loads the sampler as Open would open it for cfg with
// tables (UnwindAuto on a kernel that has bpf_loop) and unloads it,
// attaching nothing (bpf.ProbeLoad): nil when this kernel's verifier takes
// it, the error Open's auto would fall back to copies on otherwise. sprof
// check asks it with record's defaults.
func ProbeSampler(cfg Config) error {
	cfg, tables, err := resolve(cfg)
	if err != nil {
		return err
	}
	return bpf.ProbeLoad(samplerConfig(cfg, tables, nil))
}

// resolve returns cfg as the pipeline runs it, and the unwind tables'
// memory (0 without them): no copies without user stacks or with
// UnwindBPF, tables with UnwindBPF and UnwindAuto.
func resolve(cfg Config) (Config, int64, error) {
	if !cfg.User && !cfg.Kernel {
		return cfg, 0, errors.New("pipeline: neither user nor kernel stacks selected")
	}
	if !cfg.User {
		cfg.StackCopy = 0
		cfg.Unwind = UnwindCopy
	}
	var tables int64
	switch cfg.Unwind {
	case UnwindBPF:
		cfg.StackCopy = 0
		fallthrough
	case UnwindAuto:
		tables = cmp.Or(cfg.UnwindTables, bpf.DefaultUnwindTables)
	}
	return cfg, tables, nil
}

// samplerConfig is the sampler's configuration for the resolved cfg, with
// tables bytes of unwind tables and copyPids marked for stack copies.
func samplerConfig(cfg Config, tables int64, copyPids []uint32) bpf.Config {
	return bpf.Config{
		Frequency:        cfg.Frequency,
		Pids:             cfg.Pids,
		FollowForks:      cfg.Command,
		CgroupID:         cfg.CgroupID,
		IncludeIdle:      cfg.IncludeIdle,
		User:             cfg.User,
		Kernel:           cfg.Kernel,
		OffCPU:           cfg.OffCPU,
		OffCPUMin:        cfg.OffCPUMin,
		OffCPUExitBudget: cfg.OffCPUBudget,
		RunTimeStats:     cfg.RunTimeStats,
		RingBufferSize:   cfg.RingBufferSize,
		StackCopy:        cfg.StackCopy,
		CopyAll:          cfg.StackCopy > 0 && cfg.Command,
		CopyPids:         copyPids,
		UnwindTables:     tables,
		Python:           cfg.Python && cfg.User,
	}
}

func open(cfg Config) (*Pipeline, error) {
	cfg, tables, err := resolve(cfg)
	if err != nil {
		return nil, err
	}
	p := &Pipeline{cfg: cfg}
	opts := collector.Options{
		Frequency:        cfg.Frequency,
		OffCPU:           cfg.OffCPU,
		Pids:             cfg.Pids,
		FollowForks:      cfg.Command,
		Symbolizer:       cfg.Symbolizer,
		StackCopy:        cfg.StackCopy > 0,
		KernelTables:     tables > 0,
		UnwindCacheBytes: cfg.UnwindCache,
		UnwindStore:      cfg.UnwindStore,
		DebugUnwind:      cfg.DebugUnwind,
		Python:           cfg.Python && cfg.User,
		Sink:             cfg.Sink,
	}
	// /proc/kallsyms is read while the BPF programs load: both take a
	// while (0.2-0.7 s each on a 2-CPU host under load, 1-20 s in the
	// kernel matrix's emulated VMs), and on another CPU the reading costs
	// the start nothing. Frames are named only after Open returns.
	kernel := &kernelSymbols{}
	read := make(chan error, 1)
	go func() {
		var err error
		kernel.k, err = symbolize.LoadKernel()
		read <- err
	}()
	opts.Kernel = kernel
	col, err := collector.New(opts)
	if err != nil {
		<-read
		return nil, err
	}
	// The processes the sampler treats apart (Go stacks to follow, Python
	// frames, stack copies, tables to walk) are marked before the first
	// sample: marked after, a Python process's first samples had no Python
	// frames (25 ms of them on a loaded 2-CPU host, while the marks waited
	// for the tables), and none waits for kallsyms (up to 0.7 s, whose
	// samples of a growing Go stack then stopped at runtime.morestack).
	s, err := bpf.Load(samplerConfig(cfg, tables, col.CopyPids()))
	if err == nil {
		p.col, p.sampler, p.src = col, s, bpfsource.New(s)
		col.Attach(p.src)
		if err = s.Start(); err != nil {
			s.Close()
		}
	}
	if err != nil {
		<-read
		col.Close()
		return nil, err
	}
	p.KernelErr = <-read
	p.Limits = s.Limits()
	return p, nil
}

// kernelSymbols names kernel frames with the symbols Open reads from
// /proc/kallsyms; with none (k nil: no access) it names nothing.
type kernelSymbols struct{ k *symbolize.Kernel }

func (ks *kernelSymbols) Symbolize(dst []stacks.Frame, addr uint64) []stacks.Frame {
	return ks.k.Symbolize(dst, addr)
}

// Run samples until ctx is done or exited (a command's end; nil if none)
// is closed, stops the sampler, and returns the profile with its frames
// named (nil with a Sink) and the statistics. Naming the frames stops at
// once when names is done, leaving the rest as binary+offset: a second
// Ctrl-C. Run closes the collector; Close the Pipeline still.
func (p *Pipeline) Run(ctx, names context.Context, exited <-chan struct{}) (*stacks.Profile, collector.Stats, error) {
	iv, stats, err := p.col.RunInterval(ctx, p.src, exited)
	p.bpfStats, p.bpfErr = p.sampler.Stats()
	if p.cfg.Unwind != UnwindCopy {
		if k, err := p.src.TableStats(); err == nil {
			p.tables = &k
		}
	}
	p.sampler.Close()
	p.stopped = true
	if err != nil || iv == nil {
		return nil, stats, err
	}
	// A conversion or download under way when names is done would
	// otherwise hold the recording for as long as it takes.
	stop := context.AfterFunc(names, p.closeSymbolizer)
	defer stop()
	prof := iv.Resolve(names)
	stats.SymbolizeErrors, stats.Build = iv.Stats.SymbolizeErrors, iv.Stats.Build
	return prof, stats, nil
}

// SamplerStats returns the BPF program's statistics as Run ended.
func (p *Pipeline) SamplerStats() (bpf.Stats, error) { return p.bpfStats, p.bpfErr }

// UnwindStats returns the userspace unwinder's statistics so far.
func (p *Pipeline) UnwindStats() collector.UnwindStats {
	st := p.col.UnwindStats()
	if p.stopped && p.tables != nil {
		st.Kernel = p.tables
	}
	return st
}

// Ready is signalled when the sampler's ring is filling and should be
// drained before the next period.
func (p *Pipeline) Ready() <-chan struct{} { return p.sampler.Ready() }

// TablesBuilt is signalled when unwind tables are ready to be taken by a
// drain (collector.Collector.TablesBuilt).
func (p *Pipeline) TablesBuilt() <-chan struct{} { return p.col.TablesBuilt() }

// Drain moves the samples waiting now into the current interval.
func (p *Pipeline) Drain() error { return p.col.Drain(p.src) }

// Cut ends the current interval and starts the next; the Interval's
// frames are named by its Resolve, which also lets the symbolizer drop
// the tables no longer used.
func (p *Pipeline) Cut() *Interval {
	return &Interval{iv: p.col.CutInterval(p.src), sym: p.cfg.Symbolizer}
}

// Interval is one cut interval of a Pipeline.
type Interval struct {
	iv  *collector.Interval
	sym symbolize.Symbolizer
}

// Resolve names the interval's frames (see collector.Interval.Resolve)
// and then sweeps the symbolizer's cache, if it has one, so that the
// tables of binaries not seen for an interval are freed.
func (iv *Interval) Resolve(ctx context.Context) *stacks.Profile {
	p := iv.iv.Resolve(ctx)
	if s, ok := iv.sym.(interface{ Sweep() }); ok {
		s.Sweep()
	}
	return p
}

// Stats returns the interval's statistics, complete once Resolve ran.
func (iv *Interval) Stats() collector.Stats { return iv.iv.Stats }

// SymbolizerStats is what the symbolizer reports of its work; each part
// is nil when the symbolizer does not count it.
type SymbolizerStats struct {
	// Cache is the symbolizer's cache of tables in memory.
	Cache *symbolize.CacheStats
	// GSYM counts the binaries a GSYM symbolizer converted, found
	// converted in its cache directory, or could not convert.
	GSYM *symbolize.GSYMStats
}

// SymbolizerStats reports the symbolizer's table cache and its GSYM
// conversions.
func (p *Pipeline) SymbolizerStats() SymbolizerStats {
	var st SymbolizerStats
	if c, ok := p.cfg.Symbolizer.(interface{ CacheStats() symbolize.CacheStats }); ok {
		cs := c.CacheStats()
		st.Cache = &cs
	}
	if g, ok := p.cfg.Symbolizer.(*symbolize.GSYM); ok {
		gs := g.Stats()
		st.GSYM = &gs
	}
	return st
}

// Close stops sampling, releases the collector and closes the Symbolizer
// if it is an io.Closer (symbolize.GSYM), which ends its GSYM conversion
// or debuginfod download under way: an agent's interval being named when
// it exits ends there.
func (p *Pipeline) Close() error {
	var err error
	if !p.stopped {
		err = p.sampler.Close()
		p.stopped = true
	}
	p.closeSymbolizer()
	return errors.Join(err, p.col.Close())
}

func (p *Pipeline) closeSymbolizer() {
	if c, ok := p.cfg.Symbolizer.(io.Closer); ok {
		c.Close()
	}
}
