package pyroscope

import "testing"

// BenchmarkEncode measures what a push costs before the network: building
// the pprof, splitting it at the server's limits (40,000 distinct stacks
// make three parts) and compressing the parts.
func BenchmarkEncode(b *testing.B) {
	p := wideProfile(40_000, 8)
	c, err := New(Config{URL: "http://127.0.0.1:1"})
	if err != nil {
		b.Fatal(err)
	}
	var parts, bytes int
	b.ReportAllocs()
	for b.Loop() {
		raws, err := c.encode(p)
		if err != nil {
			b.Fatal(err)
		}
		parts, bytes = len(raws), 0
		for _, r := range raws {
			bytes += len(r)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(p.Samples)), "ns/sample")
	b.ReportMetric(float64(parts), "parts")
	b.ReportMetric(float64(bytes)/float64(len(p.Samples)), "gzip-bytes/sample")
}
