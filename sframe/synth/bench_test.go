package synth

import (
	"debug/elf"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/sprof/sprof/sframe"
	"github.com/sprof/sprof/sframe/cfi"
)

const libc = "/lib/x86_64-linux-gnu/libc.so.6"

// libcEHFrame returns the section of the host's libc to synthesize from.
func libcEHFrame(b *testing.B) cfi.Section {
	ef, err := elf.Open(libc)
	if err != nil {
		b.Skip(err)
	}
	defer ef.Close()
	s := ef.Section(".eh_frame")
	data, err := s.Data()
	if err != nil {
		b.Fatal(err)
	}
	return cfi.Section{Kind: cfi.EHFrame, Data: data, Order: ef.ByteOrder, AddrSize: 8, Bases: cfi.Bases{Section: s.Addr}}
}

// processCPU returns the CPU time of the whole process, garbage collector
// included. On a shared, overloaded machine the wall clock also counts the
// time spent waiting for a CPU; the "cpu-" figures do not.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSynthesizeLibc parses libc's .eh_frame, interprets every FDE
// and builds the SFrame table, as the collector does once per binary.
func BenchmarkSynthesizeLibc(b *testing.B) {
	sec := libcEHFrame(b)
	var st Stats
	cpu := processCPU(b)
	for b.Loop() {
		fr, err := cfi.Parse(sec)
		if err != nil {
			b.Fatal(err)
		}
		if _, st, err = Synthesize(sframe.ABIAMD64LE, fr); err != nil {
			b.Fatal(err)
		}
	}
	secs := b.Elapsed().Seconds()
	cpuSecs := (processCPU(b) - cpu).Seconds()
	b.ReportMetric(float64(st.FDEs*b.N)/secs, "FDEs/s")
	b.ReportMetric(float64(st.FDEs*b.N)/cpuSecs, "cpu-FDEs/s")
	b.ReportMetric(secs*1e9/float64(st.Rows*b.N), "ns/row")
	b.ReportMetric(cpuSecs*1e9/float64(st.Rows*b.N), "cpu-ns/row")
}

// BenchmarkLookupSynthesized looks up random PCs of libc's code in its
// synthesized table.
func BenchmarkLookupSynthesized(b *testing.B) {
	fr, err := cfi.Parse(libcEHFrame(b))
	if err != nil {
		b.Fatal(err)
	}
	tab, _, err := Synthesize(sframe.ABIAMD64LE, fr)
	if err != nil {
		b.Fatal(err)
	}
	fdes := tab.FDEs()
	lo, hi := fdes[0].Start, fdes[len(fdes)-1].End()
	rng := rand.New(rand.NewPCG(1, 2))
	pcs := make([]uint64, 4096)
	for i := range pcs {
		pcs[i] = lo + rng.Uint64N(hi-lo)
	}
	found := 0
	i := 0
	cpu := processCPU(b)
	for b.Loop() {
		if _, ok := tab.Lookup(pcs[i%len(pcs)]); ok {
			found++
		}
		i++
	}
	if found == 0 {
		b.Fatal("no PC found")
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/lookup")
	b.ReportMetric(float64((processCPU(b)-cpu).Nanoseconds())/float64(b.N), "cpu-ns/lookup")
}
