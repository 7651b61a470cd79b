package sframe_test

import (
	"fmt"
	"log"

	"github.com/sprof/sprof/sframe"
)

// Look up the unwind rule of an address in a binary built with
// `gcc -Wa,--gsframe`.
func ExampleTable_Lookup() {
	t, err := sframe.Open("../testdata/sframe/asm-amd64-v3")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(t.Header.Version, t.Header.ABI)
	r, ok := t.Lookup(0x401005)
	if !ok {
		log.Fatal("no rule")
	}
	fmt.Println(t.Describe(r))
	// Output:
	// SFRAME_VERSION_3 SFRAME_ABI_AMD64_ENDIAN_LITTLE
	// func 0x401000 size 8, row +4 cfa=fp+16 ra=*(cfa-8) fp=*(cfa-16)
}

// staticBinary maps one non-PIE binary, loaded where it was linked.
type staticBinary struct{ t *sframe.Table }

func (s staticBinary) Resolve(pc uint64) (sframe.Mapping, bool) {
	return sframe.Mapping{Table: s.t}, pc >= 0x400000 && pc < 0x401000
}

// Unwind an aarch64 stack: leaf was called by f1, which saved its
// PAC-signed return address into _start, the outermost frame.
func ExampleUnwinder_Unwind() {
	t, err := sframe.Open("../testdata/sframe/asm-arm64-v3")
	if err != nil {
		log.Fatal(err)
	}
	stack := &sframe.Snapshot{Base: 0x7000, Data: []byte{
		0, 0, 0, 0, 0, 0, 0, 0, // f1's saved x29
		0xb8, 0x00, 0x40, 0, 0, 0, 0x12, 0, // f1's saved x30, signed
	}}
	u := sframe.Unwinder{Arch: sframe.ArchARM64, Resolver: staticBinary{t}}
	pcs := make([]uint64, 16)
	n, stop := u.Unwind(sframe.Regs{PC: 0x4000d8, SP: 0x7000, LR: 0x4000cc}, stack, pcs)
	fmt.Printf("%#x: %v\n", pcs[:n], stop)
	// Output:
	// [0x4000d8 0x4000cc 0x4000b8]: outermost frame
}
