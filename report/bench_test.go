package report

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sprof/sprof/cbf"
	"github.com/sprof/sprof/cbf/recording"
)

// BenchmarkRead converts a recording of 100,000 samples of 20 processes
// with varied stacks, unsymbolized, and reports the cost of a sample.
func BenchmarkRead(b *testing.B) {
	const samples = 100_000
	rng := rand.New(rand.NewPCG(1, 2))
	var buf bytes.Buffer
	clock := start
	w, err := recording.NewWriter(&buf, recording.Options{Frequency: 99, Start: start, Clock: func() time.Time { return clock }})
	if err != nil {
		b.Fatal(err)
	}
	m, err := cbf.NewImageMap("", cbf.Word64, []cbf.Image{{Path: "/app", Base: 0x400000, EndOfText: 0x800000}})
	if err != nil {
		b.Fatal(err)
	}
	for pid := uint32(1); pid <= 20; pid++ {
		w.Process(start, pid, "app", m)
	}
	stack := make([]uint64, 40)
	for i := range samples {
		clock = start.Add(time.Duration(i) * time.Millisecond)
		for j := range stack {
			stack[j] = 0x400000 + uint64(rng.IntN(64)<<8) + uint64(j)
		}
		w.Sample(clock, uint32(1+i%20), uint32(1+i%20), 0, "app", stack[:10+rng.IntN(30)], nil, 0, 1)
	}
	w.Close()
	data := buf.Bytes()
	b.ResetTimer()
	for b.Loop() {
		if _, res, err := Read(bytes.NewReader(data), Options{}); err != nil || res.Kept != samples {
			b.Fatal(err, res)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/samples, "ns/sample")
	b.ReportMetric(float64(len(data))/samples, "bytes/sample")
}
