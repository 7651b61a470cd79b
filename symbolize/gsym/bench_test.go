package gsym

import (
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// BenchmarkLookup measures lookups, with line table and inline walk, in a
// large Go binary (the `go` command, about 15,000 functions; see
// scripts/gsym-bench-file.sh): over 100,000 addresses spread over all its
// functions ("spread"), and over 1,000 of them ("hot", as a profile's hot
// code is). Set GSYM_BENCH_FILE to measure another GSYM file.
func BenchmarkLookup(b *testing.B) {
	path := benchFile(b)
	b.Run("spread", func(b *testing.B) { benchLookup(b, path, 100_000) })
	b.Run("hot", func(b *testing.B) { benchLookup(b, path, 1_000) })
}

// benchFile returns $GSYM_BENCH_FILE or the file the script builds once.
func benchFile(b *testing.B) string {
	if p := os.Getenv("GSYM_BENCH_FILE"); p != "" {
		return p
	}
	out, err := exec.Command("../../scripts/gsym-bench-file.sh").Output()
	if err != nil {
		b.Skipf("no large GSYM file (set GSYM_BENCH_FILE): scripts/gsym-bench-file.sh: %v", err)
	}
	return strings.TrimSpace(string(out))
}

func benchLookup(b *testing.B, path string, n int) {
	r, err := Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	addrs := spreadAddresses(r, n)
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
	i := 0
	cpu0 := cpuTime()
	for b.Loop() {
		r.LookupInto(&res, addrs[i%len(addrs)])
		i++
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(i), "ns/lookup")
	// On a shared machine wall time counts other processes' turns too;
	// CPU time is this process's own cost.
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(i), "cpu-ns/lookup")
}

// spreadAddresses returns n addresses, each in a function picked at
// random, at a random offset up to the next function's start.
func spreadAddresses(r *Reader, n int) []uint64 {
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
	return addrs
}

// cpuTime is the process's user and system CPU time in nanoseconds.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
