package gsym_test

import (
	"testing"
	"time"

	"github.com/sprof/sprof/internal/gsymbench"
	"github.com/sprof/sprof/symbolize/gsym"
)

// BenchmarkLookup measures lookups, with line table and inline walk, in a
// large Go binary (the go command, about 15,000 functions; see
// gsymbench.File): over 100,000 addresses spread over all its functions
// ("spread"), and over 1,000 of them ("hot", as a profile's hot code is).
// Both are measured in the steady state, once every function looked up
// has been decoded (after 32 lookups of it); BenchmarkGsymLookupStdin in
// cmd/sprof measures lookups that stream. Set GSYM_BENCH_FILE to measure
// another GSYM file.
func BenchmarkLookup(b *testing.B) {
	path := gsymbench.File(b)
	b.Run("spread", func(b *testing.B) { benchLookup(b, path, 100_000) })
	b.Run("hot", func(b *testing.B) { benchLookup(b, path, 1_000) })
}

func benchLookup(b *testing.B, path string, n int) {
	r, err := gsym.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	addrs := gsymbench.Addresses(r, n)
	var res gsym.LookupResult
	found := 0
	for pass := range 40 {
		for _, a := range addrs {
			if r.LookupInto(&res, a) == nil && pass == 0 {
				found++
			}
		}
	}
	if found < len(addrs)/2 {
		b.Fatalf("only %d of %d addresses found", found, len(addrs))
	}
	i := 0
	cpu0 := gsymbench.CPUTime()
	for b.Loop() {
		r.LookupInto(&res, addrs[i%len(addrs)])
		i++
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(i), "ns/lookup")
	b.ReportMetric(float64((gsymbench.CPUTime()-cpu0).Nanoseconds())/float64(i), "cpu-ns/lookup")
}

// BenchmarkLookupBatch measures LookupBatch on BenchmarkLookup's 100,000
// spread addresses, in a random order, per lookup: the sort, the walk and
// the lookups. "cold" looks them up in a Reader opened for the batch,
// every function streamed, as `sprof report` does, in parallel parts when
// GOMAXPROCS allows (-cpu 1 measures one part alone); "steady" in the
// steady state of BenchmarkLookup, once batch after batch has decoded
// every function looked up 32 times, as a long-running profiler does, in
// one part.
func BenchmarkLookupBatch(b *testing.B) {
	path := gsymbench.File(b)
	b.Run("cold", func(b *testing.B) { benchLookupBatch(b, path, false) })
	b.Run("steady", func(b *testing.B) { benchLookupBatch(b, path, true) })
}

func benchLookupBatch(b *testing.B, path string, steady bool) {
	open := func() *gsym.Reader {
		r, err := gsym.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		return r
	}
	r := open()
	addrs := gsymbench.Addresses(r, 100_000)
	found := 0
	count := func(i int, res *gsym.LookupResult, err error) {
		if err == nil {
			found++
		}
	}
	if steady {
		for range 40 {
			r.LookupBatch(addrs, count)
		}
	}
	b.ReportAllocs()
	n := 0
	var cpu time.Duration
	for b.Loop() {
		if !steady {
			b.StopTimer()
			r.Close()
			r = open()
			b.StartTimer()
		}
		cpu0 := gsymbench.CPUTime()
		r.LookupBatch(addrs, count)
		cpu += gsymbench.CPUTime() - cpu0
		n += len(addrs)
	}
	r.Close()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/lookup")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(n), "cpu-ns/lookup")
	if found < n/2 {
		b.Fatalf("only %d of %d addresses found", found, n)
	}
}
