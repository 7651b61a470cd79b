package convert

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/sprof/sprof/symbolize/gsym"
)

// BenchmarkConvert converts the Go fixture (or GSYM_BENCH_BINARY) and
// encodes it, reporting CPU time, which on a shared machine says more than
// wall time, and the output's size.
func BenchmarkConvert(b *testing.B) {
	path := filepath.Join(fixtures, "gofix")
	if p := os.Getenv("GSYM_BENCH_BINARY"); p != "" {
		path = p
	}
	size := 0
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		c, st, err := ELF(path, Options{})
		if err != nil {
			b.Fatal(err)
		}
		out, err := c.Encode(gsym.EncodeOptions{ByteOrder: st.ByteOrder})
		if err != nil {
			b.Fatal(err)
		}
		size = len(out)
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/1e6/float64(b.N), "cpu-ms/op")
	b.ReportMetric(float64(size), "bytes")
}

func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
