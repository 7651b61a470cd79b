package gsym

import (
	"math/rand/v2"
	"os"
	"testing"
)

// BenchmarkLookup measures a hot lookup, with line table and inline walk,
// over 100,000 addresses spread over a Go binary's functions. Set
// GSYM_BENCH_FILE to measure another (larger) GSYM file.
func BenchmarkLookup(b *testing.B) {
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
	addrs := make([]uint64, 100_000)
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
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.LookupInto(&res, addrs[i%len(addrs)])
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/lookup")
}
