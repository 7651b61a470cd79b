package pyroscope

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sprof/sprof/stacks"
)

// busyProfile has n distinct stacks, 5 to 40 frames deep, drawn from 5,000
// locations of one binary: the shape of a busy service's 15 s interval.
func busyProfile(n int) *stacks.Profile {
	rng := rand.New(rand.NewPCG(3, 4))
	exe := &stacks.Mapping{Kind: stacks.User, Start: 0x400000, Limit: 0x800000, File: "/usr/bin/busy", BuildID: "beef"}
	locs := make([]*stacks.Location, 5000)
	for i := range locs {
		locs[i] = &stacks.Location{Mapping: exe, Address: 0x400000 + uint64(i)*16,
			Frames: []stacks.Frame{{Function: fmt.Sprintf("busy::Module%d::handler%d(Request const&)", i/100, i), File: "/src/busy.cc", Line: i}}}
	}
	p := &stacks.Profile{Start: time.Now(), Duration: 15 * time.Second, Period: time.Second / 99, Mappings: []*stacks.Mapping{exe}}
	for range n {
		st := make([]*stacks.Location, 5+rng.IntN(36))
		for d := range st {
			st[d] = locs[rng.IntN(len(locs))]
		}
		p.Samples = append(p.Samples, &stacks.Sample{Stack: st, Count: 1 + int64(rng.IntN(3)), Pid: 1, Comm: "busy"})
	}
	return p
}

// BenchmarkEncode measures what a push costs before the network: building
// the pprof, splitting it at the server's limits (40,000 distinct stacks
// make at least three parts) and compressing the parts.
func BenchmarkEncode(b *testing.B) {
	p := busyProfile(40_000)
	c, err := New(Config{URL: "http://127.0.0.1:1"})
	if err != nil {
		b.Fatal(err)
	}
	var parts, size int
	b.ReportAllocs()
	for b.Loop() {
		out, err := c.encodeSeries(nil, 0, Series{Service: "bench", Profile: p})
		if err != nil {
			b.Fatal(err)
		}
		parts, size = len(out), 0
		for _, r := range out {
			size += len(r.gz)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(p.Samples)), "ns/sample")
	b.ReportMetric(float64(parts), "parts")
	b.ReportMetric(float64(size)/float64(len(p.Samples)), "gzip-bytes/sample")
}
