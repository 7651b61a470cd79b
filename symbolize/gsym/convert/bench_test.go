package convert

import (
	"context"
	"debug/elf"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/sprof/sprof/symbolize/gsym"
)

// benchBinary is the Go fixture, or GSYM_BENCH_BINARY (a large program:
// the figures in the package's history are for a 20 MB cmd/go and SQLite
// built with -g).
func benchBinary() string {
	if p := os.Getenv("GSYM_BENCH_BINARY"); p != "" {
		return p
	}
	return filepath.Join(fixtures, "gofix")
}

// BenchmarkConvert converts a binary and encodes it, reporting CPU time,
// which on a shared machine says more than wall time, and the output's
// size.
func BenchmarkConvert(b *testing.B) {
	path := benchBinary()
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

// BenchmarkDWARF converts the DWARF of a binary, its sections already
// decompressed: the DIE walk, range lists, line programs and the building
// of FunctionInfos. It reports MB/s of .debug_info and .debug_line, the
// time per function, and CPU time (all cores).
func BenchmarkDWARF(b *testing.B) {
	path := benchBinary()
	f, err := elf.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	mapped, err := mapFile(path)
	if err != nil {
		b.Fatal(err)
	}
	defer syscall.Munmap(mapped)
	d, err := loadDWARF(f, mapped, 0)
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		if n, err = convertDWARF(context.Background(), gsym.NewCreator(), d, 0, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/1e6/float64(b.N), "cpu-ms/op")
	b.ReportMetric(float64(len(d.info)+len(d.line))*float64(b.N)/1e6/b.Elapsed().Seconds(), "MB/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n*b.N), "ns/function")
}

func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
