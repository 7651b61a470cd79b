package sframe

import (
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// threadCPU measures the CPU time of the benchmark's thread, so that a
// per-operation figure can be reported next to the wall-clock one: on a
// shared, overloaded machine the wall clock also counts the time the
// thread waited for a CPU.
type threadCPU struct{ start time.Duration }

func startThreadCPU(b *testing.B) *threadCPU {
	runtime.LockOSThread()
	b.Cleanup(runtime.UnlockOSThread)
	return &threadCPU{start: threadTime(b)}
}

func (c *threadCPU) report(b *testing.B, ops int, unit string) {
	b.ReportMetric(float64(threadTime(b)-c.start)/float64(ops), "cpu-"+unit)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(ops), unit)
}

func threadTime(b *testing.B) time.Duration {
	const rusageThread = 1 // RUSAGE_THREAD
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// bigSection returns a V2 amd64 section of n functions, 64 bytes apart,
// 48 bytes long, with 3 rows each (like a real prologue and epilogue).
func bigSection(n int) []byte {
	fdes := make([]testFDE, n)
	for i := range fdes {
		fdes[i] = testFDE{start: int32(0x10000 + i*64), size: 48, rows: []byte{0, 0x03, 8, 4, 0x05, 16, 0xf0, 40, 0x03, 8}, numRows: 3}
	}
	return section(1, fdes...)
}

func BenchmarkLookup(b *testing.B) {
	const nfdes = 50000
	tab, err := Parse(bigSection(nfdes), 0)
	if err != nil || len(tab.FDEs()) != nfdes {
		b.Fatalf("%v, %d FDEs", err, len(tab.FDEs()))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	pcs := make([]uint64, 4096)
	for i := range pcs {
		pcs[i] = 0x10000 + uint64(rng.IntN(nfdes))*64 + uint64(rng.IntN(48))
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu := startThreadCPU(b)
	for i := 0; i < b.N; i++ {
		if _, ok := tab.Lookup(pcs[i%len(pcs)]); !ok {
			b.Fatal("no rule")
		}
	}
	cpu.report(b, b.N, "ns/lookup")
}

func BenchmarkParse(b *testing.B) {
	data := bigSection(50000)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := Parse(data, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUnwind unwinds each fixture's stack dump; ns/frame is the cost
// of one frame including the resolver and memory reads.
func BenchmarkUnwind(b *testing.B) {
	for _, bin := range stackDumps(b) {
		b.Run(filepath.Base(bin), func(b *testing.B) {
			u, d := loadFixture(b, bin)
			out := make([]uint64, 64)
			b.ReportAllocs()
			b.ResetTimer()
			cpu := startThreadCPU(b)
			frames := 0
			for i := 0; i < b.N; i++ {
				n, _ := u.Unwind(d.regs, &d.stack, out)
				frames += n
			}
			cpu.report(b, frames, "ns/frame")
		})
	}
}
