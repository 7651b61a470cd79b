// Package gsymbench holds what the GSYM lookup benchmarks share — the large
// GSYM file, the addresses looked up in it, the CPU clock — so that the
// library's in-process figures (symbolize/gsym) and the CLI's
// whole-process ones (cmd/sprof) measure the same lookups.
package gsymbench

import (
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sprof/sprof/symbolize/gsym"
)

// File returns a large GSYM file: $GSYM_BENCH_FILE, else the go command
// converted by llvm-gsymutil-22 (scripts/gsym-bench-file.sh, which builds
// it once and keeps it). It skips b when neither can be had.
func File(b testing.TB) string {
	b.Helper()
	if p := os.Getenv("GSYM_BENCH_FILE"); p != "" {
		return p
	}
	_, src, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(src), "..", "..", "scripts", "gsym-bench-file.sh")
	out, err := exec.Command(script).Output()
	if err != nil {
		b.Skipf("no large GSYM file (set GSYM_BENCH_FILE): %s: %v", script, err)
	}
	return strings.TrimSpace(string(out))
}

// Addresses returns n addresses in r, each in a function picked at random
// (the same ones every time), at a random offset up to the next
// function's start.
func Addresses(r *gsym.Reader, n int) []uint64 {
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

// CPUTime is the process's user and system CPU time. On a shared machine
// wall time counts other processes' turns too; CPU time is the process's
// own cost.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
