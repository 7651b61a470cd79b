package cbf_test

import (
	"fmt"

	"github.com/sprof/sprof/cbf"
)

// A stack as a frame-pointer walk returns it, leaf first, stored in CBF and
// read back with the image each frame belongs to.
func Example() {
	pcs := []uint64{0x5555555551a9, 0x555555555230, 0x7ffff7829d90, 0x7ffff7829e40, 0x555555555085}
	rec := cbf.AppendStack(nil, cbf.Word64, pcs, false)
	fmt.Printf("%d frames in %d bytes\n", len(pcs), len(rec))

	images, err := cbf.NewImageMap("", cbf.Word64, []cbf.Image{
		{Path: "/home/u/a.out", Base: 0x555555554000, EndOfText: 0x555555556000},
		{Path: "/usr/lib/x86_64-linux-gnu/libc.so.6", Base: 0x7ffff7800000, EndOfText: 0x7ffff7995000, TextOffset: 0x28000},
	})
	if err != nil {
		panic(err)
	}
	frames, _, err := cbf.Decode(make([]cbf.Frame, 0, 64), rec)
	if err != nil {
		panic(err)
	}
	for _, f := range frames {
		im := images.Image(images.Lookup(f.SymbolAddr()))
		fmt.Printf("%-5s %s+0x%x\n", f.Kind, im.Name, im.FileOffset(f.SymbolAddr()))
	}
	// Output:
	// 5 frames in 29 bytes
	// pc    a.out+0x11a9
	// ra    a.out+0x122f
	// ra    libc.so.6+0x51d8f
	// ra    libc.so.6+0x51e3f
	// ra    a.out+0x1084
}
