package flamegraph

import (
	"io"
	"strconv"
	"testing"
)

// BenchmarkWriteSVG renders a tree of ~100,000 nodes (1,000 stacks 100
// frames deep sharing their first 20 frames) and reports the cost per
// node and the SVG size per drawn frame.
func BenchmarkWriteSVG(b *testing.B) {
	t := NewTree()
	stack := make([]Frame, 100)
	for i := range 1000 {
		for d := range stack {
			name := "shared" + strconv.Itoa(d)
			if d >= 20 {
				name = "ns::Class" + strconv.Itoa(i) + "::method" + strconv.Itoa(d) + "(int)"
			}
			stack[d] = Frame{Name: name, Kind: Kind(d % 4)}
		}
		t.Add(stack, int64(1+i%7))
	}
	var out counter
	b.ReportAllocs()
	for b.Loop() {
		out = 0
		if err := t.WriteSVG(&out, Options{MinWidth: 0.01}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(t.nodes)), "ns/node")
	b.ReportMetric(float64(out)/float64(len(t.nodes)), "bytes/node")
}

type counter int64

func (c *counter) Write(p []byte) (int, error) { *c += counter(len(p)); return len(p), nil }

var _ io.Writer = (*counter)(nil)
