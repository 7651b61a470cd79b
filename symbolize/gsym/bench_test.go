package gsym

import (
	"math/rand/v2"
	"os"
	"syscall"
	"testing"
)

// BenchmarkLookup measures lookups, with line table and inline walk, over
// 100,000 addresses spread over a Go binary's functions ("spread"), and
// over 1,000 of them ("hot", as a profile's hot code is). Set
// GSYM_BENCH_FILE to measure another (larger) GSYM file.
func BenchmarkLookup(b *testing.B) {
	b.Run("spread", func(b *testing.B) { benchLookup(b, 100_000) })
	b.Run("hot", func(b *testing.B) { benchLookup(b, 1_000) })
}

func benchLookup(b *testing.B, n int) {
	path := fixtures + "/gofix.llvm.gsym"
	if p := os.Getenv("GSYM_BENCH_FILE"); p != "" {
		path = p
	}
	r, err := Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	addrs := make([]uint64, n)
	for i := range addrs {
		f := rng.IntN(r.NumFunctions())
		start := r.Address(f)
		end := start + 1
		if f+1 < r.NumFunctions() {
			end = r.Address(f + 1)
		}
		addrs[i] = start + rng.Uint64N(max(end-start, 1))
	}
	var res LookupResult
	found := 0
	for _, a := range addrs {
		if r.LookupInto(&res, a) == nil {
			found++
		}
	}
	if found < len(addrs)/2 {
		b.Fatalf("only %d of %d addresses found", found, len(addrs))
	}
	cpu0 := cpuTime()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.LookupInto(&res, addrs[i%len(addrs)])
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/lookup")
	// On a shared machine wall time counts other processes' turns too;
	// CPU time is this process's own cost.
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/lookup")
}

// cpuTime is the process's user and system CPU time in nanoseconds.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
