package jit

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// BenchmarkLookup looks up random addresses in the symbols of a large JVM
// or Node process: 100,000 functions.
func BenchmarkLookup(b *testing.B) {
	var tb Table
	const n = 100_000
	for i := range n {
		tb.Add(Symbol{Start: 0x7f0000000000 + uint64(i)*0x200, Size: 0x180, Name: fmt.Sprintf("JS:*f%d", i)})
	}
	tb.Lookup(0)
	r := rand.New(rand.NewPCG(1, 1))
	addrs := make([]uint64, 4096)
	for i := range addrs {
		addrs[i] = 0x7f0000000000 + r.Uint64N(n*0x200)
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		tb.Lookup(addrs[i%len(addrs)])
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/lookup")
}

// BenchmarkPerfMapParse parses Node-like perf map lines.
func BenchmarkPerfMapParse(b *testing.B) {
	var sb strings.Builder
	const lines = 10_000
	for i := range lines {
		fmt.Fprintf(&sb, "%x %x JS:*handler%d /srv/app/lib/routes.js:%d:%d\n", 0x7f0000000000+i*0x200, 0x180, i, i, i%80)
	}
	data := []byte(sb.String())
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for b.Loop() {
		var p PerfMap
		var tb Table
		p.Feed(data, tb.Add)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*lines), "ns/line")
}

// BenchmarkSettle adds a drain's worth of newly compiled functions
// (1,000) to the 100,000 of a process and looks one up, as the collector
// does after reading a perf map: new code in free memory (a merge), or
// over code freed before (the overlaps make Table repaint its segments).
func BenchmarkSettle(b *testing.B) {
	var base Table
	for i := range 100_000 {
		base.Add(Symbol{Start: uint64(i) * 0x400, Size: 0x180, Name: "f"})
	}
	base.Lookup(0)
	for _, c := range []struct {
		name   string
		offset uint64
	}{{"merge", 0x200}, {"repaint", 0x100}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				t := Table{syms: slices.Clone(base.syms), segs: slices.Clone(base.segs), pending: base.pending}
				b.StartTimer()
				for i := range 1000 {
					t.Add(Symbol{Start: uint64(i)*0x400*97 + c.offset, Size: 0x100, Name: "g"})
				}
				t.Lookup(0)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*1000), "ns/symbol")
		})
	}
}
