package flamegraph_test

import (
	"fmt"
	"io"

	"github.com/sprof/sprof/exporters/flamegraph"
)

func Example() {
	t := flamegraph.NewTree()
	main := flamegraph.Frame{Name: "main", Kind: flamegraph.User}
	t.Add([]flamegraph.Frame{main, {Name: "work", Kind: flamegraph.User}, {Name: "hash", Kind: flamegraph.Inlined}}, 30)
	t.Add([]flamegraph.Frame{main, {Name: "write", Kind: flamegraph.Kernel}}, 10)
	if err := t.WriteSVG(io.Discard, flamegraph.Options{Title: "my service", Icicle: true}); err != nil {
		fmt.Println(err)
	}
	fmt.Println(t.Total(), "samples")
	// Output: 40 samples
}
