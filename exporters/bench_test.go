package exporters

import (
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sprof/sprof/stacks"
)

// syntheticProfile builds a deterministic profile shaped like a busy host:
// nSamples samples (count 1 each, as a recording holds them) spread over
// ~50,000 distinct stacks 5–60 frames deep, 200 threads, 20 libraries plus
// the kernel, a tenth of the locations with inline levels and a twentieth
// unsymbolized.
func syntheticProfile(nSamples int) *stacks.Profile {
	rng := rand.New(rand.NewPCG(1, 2))
	p := &stacks.Profile{Start: time.Unix(1_800_000_000, 0), Duration: time.Minute, Period: time.Second / 99}
	kern := &stacks.Mapping{Kind: stacks.Kernel, File: stacks.KernelFile}
	for i := range 21 {
		start := uint64(0x7f0000000000 + i*0x10000000)
		p.Mappings = append(p.Mappings, &stacks.Mapping{Kind: stacks.User, Start: start, Limit: start + 0x1000000,
			File: fmt.Sprintf("/usr/lib/lib%d.so", i), BuildID: fmt.Sprintf("%040x", i+1)})
	}
	p.Mappings = append(p.Mappings, kern)

	locs := make([]*stacks.Location, 20_000)
	for i := range locs {
		m := p.Mappings[rng.IntN(len(p.Mappings))]
		addr := m.Start + uint64(rng.IntN(0x1000000))
		if m == kern {
			addr = 0xffffffff81000000 + uint64(rng.IntN(0x1000000))
		}
		loc := &stacks.Location{Mapping: m, Address: addr}
		if rng.IntN(20) != 0 {
			levels := 1
			if rng.IntN(10) == 0 {
				levels = 2 + rng.IntN(3)
			}
			for l := range levels {
				loc.Frames = append(loc.Frames, stacks.Frame{
					Function: fmt.Sprintf("ns::Class%d::method%d(int, char const*)", i%500, l),
					File:     fmt.Sprintf("/src/module%d/file%d.cc", i%50, i%500), Line: 10 + l})
			}
		}
		locs[i] = loc
	}
	distinct := make([][]*stacks.Location, 50_000)
	for i := range distinct {
		depth := 5 + rng.IntN(56)
		st := make([]*stacks.Location, depth)
		for d := range st {
			st[d] = locs[rng.IntN(len(locs))]
		}
		distinct[i] = st
	}
	zipf := rand.NewZipf(rng, 1.1, 1, uint64(len(distinct)-1))
	p.Samples = make([]*stacks.Sample, nSamples)
	for i := range p.Samples {
		tid := uint32(1000 + rng.IntN(200))
		p.Samples[i] = &stacks.Sample{Stack: distinct[zipf.Uint64()], Count: 1,
			Pid: tid / 10 * 10, Tid: tid, Comm: fmt.Sprintf("worker-%d", tid/10), Truncated: rng.IntN(100) == 0}
	}
	return p
}

func benchmarkFormat(b *testing.B, f Format, nSamples int) {
	p := syntheticProfile(nSamples)
	var out countingWriter
	b.ReportAllocs()
	b.ResetTimer()
	before := cpuTime()
	for b.Loop() {
		out = 0
		if err := Write(&out, p, f, Options{}); err != nil {
			b.Fatal(err)
		}
	}
	cpu := cpuTime() - before
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(nSamples), "ns/sample")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/float64(nSamples), "cpu-ns/sample")
	b.ReportMetric(float64(out)/float64(nSamples), "bytes/sample")
}

func BenchmarkPprof(b *testing.B)      { benchmarkFormat(b, Pprof, 100_000) }
func BenchmarkFolded(b *testing.B)     { benchmarkFormat(b, Folded, 100_000) }
func BenchmarkSVG(b *testing.B)        { benchmarkFormat(b, SVG, 100_000) }
func BenchmarkSpeedscope(b *testing.B) { benchmarkFormat(b, Speedscope, 100_000) }

// BenchmarkPprofMillion exports a 1,000,000-sample profile and reports the
// peak heap the export itself needed on top of the input.
func BenchmarkPprofMillion(b *testing.B) {
	p := syntheticProfile(1_000_000)
	var out countingWriter
	var peak uint64
	var cpu time.Duration
	b.ResetTimer()
	for b.Loop() {
		out = 0
		runtime.GC()
		stop := watchHeap()
		before := cpuTime()
		if err := WritePprof(&out, p, Options{}); err != nil {
			b.Fatal(err)
		}
		cpu += cpuTime() - before
		peak = max(peak, stop())
	}
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/export")
	// CPU time (all threads, GC included) tells the cost on a busy host,
	// where wall time mostly measures the other tenants.
	b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/export")
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
	b.ReportMetric(float64(out)/(1<<20), "output-MiB")
}

// watchHeap polls the live heap until the returned function is called; that
// function returns how far the heap rose above where it started.
func watchHeap() func() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var peak atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > base && ms.HeapAlloc-base > peak.Load() {
				peak.Store(ms.HeapAlloc - base)
			}
			select {
			case <-done:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	})
	return func() uint64 {
		close(done)
		wg.Wait()
		return peak.Load()
	}
}

// cpuTime is the user and system time the process has used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// countingWriter counts the bytes written to it and keeps none.
type countingWriter int64

func (c *countingWriter) Write(b []byte) (int, error) {
	*c += countingWriter(len(b))
	return len(b), nil
}

var _ io.Writer = (*countingWriter)(nil)
