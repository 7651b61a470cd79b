package cpython_test

import (
	"fmt"

	"github.com/sprof/sprof/symbolize/cpython"
)

// A native stack of python3.11 (leaf first) and the Python frames the
// sampler recorded: the frames one _PyEval_EvalFrameDefault call runs go
// just leafward of that call's native frame.
func ExampleProcess_Splice() {
	p := &cpython.Process{Eval: []cpython.Range{{Start: 0x501f40, Limit: 0x50a000}}}
	native := []uint64{0x4f0010 /* x_add */, 0x502345 /* _PyEval_EvalFrameDefault */, 0x4c0000 /* main */}
	py := []cpython.Sampled{
		{Code: 0x7f0000001000, Instr: 0x7f00000010c0},                     // leaf
		{Code: 0x7f0000002000 | cpython.EntryFlag, Instr: 0x7f00000020d0}, // <module>, the call's first
	}
	for _, addr := range p.Splice(nil, native, py) {
		if cpython.IsFrame(addr) {
			fmt.Printf("python %#x\n", addr&^cpython.FrameTag)
		} else {
			fmt.Printf("native %#x\n", addr)
		}
	}
	// Output:
	// native 0x4f0010
	// python 0x7f00000010c0
	// python 0x7f00000020d0
	// native 0x502345
	// native 0x4c0000
}
