package jit_test

import (
	"fmt"

	"github.com/sprof/sprof/symbolize/jit"
)

// A perf map as Node writes it with --perf-basic-prof, read in two pieces
// as it grows; the second line is whole only after the second write.
func Example() {
	var p jit.PerfMap
	var t jit.Table
	p.Feed([]byte("7f3c1800a300 84 JS:*hotLoop /tmp/hot.js:3:17\n7f3c1800a400 4"), t.Add)
	p.Feed([]byte("0 JS:~main /tmp/hot.js:10:1\n"), t.Add)
	for _, addr := range []uint64{0x7f3c1800a310, 0x7f3c1800a43f, 0x7f3c1800a440} {
		if s := t.Lookup(addr); s != nil {
			fmt.Printf("%#x %s\n", addr, s.Name)
		} else {
			fmt.Printf("%#x unknown\n", addr)
		}
	}
	// Output:
	// 0x7f3c1800a310 JS:*hotLoop /tmp/hot.js:3:17
	// 0x7f3c1800a43f JS:~main /tmp/hot.js:10:1
	// 0x7f3c1800a440 unknown
}
