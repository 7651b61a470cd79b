package agent

import (
	"errors"
	"math/bits"
	"runtime"

	"github.com/sprof/sprof/bpf"
	"github.com/sprof/sprof/collector"
	"github.com/sprof/sprof/collector/bpfsource"
	"github.com/sprof/sprof/stacks"
	"github.com/sprof/sprof/symbolize"
)

// BPFConfig says what the BPF sampler records.
type BPFConfig struct {
	// Frequency is samples per second per CPU; 19 is Grafana Alloy's
	// default for always-on profiling.
	Frequency int
	// User and Kernel select the stacks; at least one must be set.
	User, Kernel bool
	// RingBufferSize is the BPF ring's size in bytes, a power of two; 0
	// sizes it to hold ringSeconds of samples.
	RingBufferSize int
	// Symbolizer names user-space frames for the agent's whole life, so
	// its caches must be bounded (the Options.CacheBytes of
	// symbolize.GSYM and symbolize.ELF); nil means an ELF symbolizer with
	// the default budget. A symbolize.GSYM reads each binary's DWARF once
	// per host instead of once per agent start.
	Symbolizer symbolize.Symbolizer
}

// ringSeconds is how much the default ring holds: the first intervals
// symbolize every binary a host runs, which can keep the agent from
// draining for a few seconds.
const ringSeconds = 8

// BPF is the agent's Recorder on a real host: the BPF sampler, the
// collector and the symbolizer, opened once for the agent's life.
type BPF struct {
	sampler *bpf.Sampler
	col     *collector.Collector
	src     collector.Source
	sym     symbolize.Symbolizer
	// KernelErr says why kernel frames stay unnamed (no access to
	// /proc/kallsyms), nil when they are named; user space is profiled
	// either way.
	KernelErr error
}

// OpenBPF opens the collector and then the sampler, in that order so no
// process starts unseen in between.
func OpenBPF(cfg BPFConfig) (*BPF, error) {
	if !cfg.User && !cfg.Kernel {
		return nil, errors.New("agent: neither user nor kernel stacks selected")
	}
	r := &BPF{sym: cfg.Symbolizer}
	if r.sym == nil {
		r.sym = symbolize.NewELF(symbolize.Options{})
	}
	opts := collector.Options{Frequency: cfg.Frequency, Symbolizer: r.sym}
	if k, err := symbolize.LoadKernel(); err != nil {
		r.KernelErr = err
	} else {
		opts.Kernel = k
	}
	col, err := collector.New(opts)
	if err != nil {
		return nil, err
	}
	ring := cfg.RingBufferSize
	if ring == 0 {
		ring = defaultRing(cfg.Frequency, runtime.NumCPU())
	}
	s, err := bpf.Open(bpf.Config{Frequency: cfg.Frequency, User: cfg.User, Kernel: cfg.Kernel, RingBufferSize: ring})
	if err != nil {
		col.Close()
		return nil, err
	}
	r.sampler, r.col, r.src = s, col, bpfsource.New(s)
	return r, nil
}

// defaultRing sizes the ring for ringSeconds of samples of about 1 KiB,
// between 256 KiB and 64 MiB.
func defaultRing(freq, cpus int) int {
	want := uint64(freq) * uint64(cpus) * 1024 * ringSeconds
	size := uint64(1) << bits.Len64(want-1)
	return int(min(max(size, 256<<10), 64<<20))
}

// Drain implements Recorder.
func (r *BPF) Drain() error { return r.col.Drain(r.src) }

// Cut implements Recorder. It then sweeps the symbolizer's cache, if it
// has one (symbolize.ELF and symbolize.GSYM do), so the tables of
// binaries not seen for an interval are freed.
func (r *BPF) Cut() (*stacks.Profile, collector.Stats) {
	p, st := r.col.Cut(r.src)
	if s, ok := r.sym.(interface{ Sweep() }); ok {
		s.Sweep()
	}
	return p, st
}

// SymbolizerStats implements Recorder with what the symbolizer reports:
// its table cache (a GSYM symbolizer's counts its files and its ELF
// symbolizer's tables) and its GSYM conversions.
func (r *BPF) SymbolizerStats() SymbolizerStats {
	var st SymbolizerStats
	if c, ok := r.sym.(interface{ CacheStats() symbolize.CacheStats }); ok {
		cs := c.CacheStats()
		st.Cache = &cs
	}
	if g, ok := r.sym.(*symbolize.GSYM); ok {
		gs := g.Stats()
		st.GSYM = &gs
	}
	return st
}

// Close stops sampling.
func (r *BPF) Close() error {
	return errors.Join(r.sampler.Close(), r.col.Close())
}
