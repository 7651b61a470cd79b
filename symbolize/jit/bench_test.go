package jit

import (
	"fmt"
	"math/rand/v2"
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

// BenchmarkSettle adds a drain's worth of new functions (1,000) to a table
// of 100,000 and looks one up, as the collector does every drain.
func BenchmarkSettle(b *testing.B) {
	var tb Table
	for i := range 100_000 {
		tb.Add(Symbol{Start: uint64(i) * 0x400, Size: 0x180, Name: "f"})
	}
	tb.Lookup(0)
	next := uint64(0)
	for b.Loop() {
		for range 1000 {
			tb.Add(Symbol{Start: next*0x400 + 0x200, Size: 0x100, Name: "g"})
			next = (next + 1) % 100_000
		}
		tb.Lookup(0)
	}
}
