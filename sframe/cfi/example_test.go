package cfi_test

import (
	"debug/elf"
	"fmt"
	"log"

	"github.com/sprof/sprof/sframe/cfi"
)

// Interpret the FDE of one function of a fixture and print where the CFA
// and the return address are at each of its rows.
func Example() {
	ef, err := elf.Open("../../testdata/sframe/asm-amd64-v1")
	if err != nil {
		log.Fatal(err)
	}
	defer ef.Close()
	s := ef.Section(".eh_frame")
	data, err := s.Data()
	if err != nil {
		log.Fatal(err)
	}
	fr, err := cfi.Parse(cfi.Section{Kind: cfi.EHFrame, Data: data, Order: ef.ByteOrder, AddrSize: 8, Bases: cfi.Bases{Section: s.Addr}})
	if err != nil {
		log.Fatal(err)
	}
	// Track rbp (6) and the return address column (16) of amd64.
	in := cfi.Interpreter{Track: []uint64{6, 16}}
	rows, err := in.Rows(&fr.FDEs[0])
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range rows {
		fmt.Printf("%#x: CFA r%d%+d, rbp %v%+d, RA %v%+d\n", r.Start, r.CFA.Reg, r.CFA.Offset,
			r.Regs[0].Kind, r.Regs[0].Offset, r.Regs[1].Kind, r.Regs[1].Offset)
	}
	// Output:
	// 0x401000: CFA r7+8, rbp unspecified+0, RA offset-8
	// 0x401001: CFA r7+16, rbp offset-16, RA offset-8
	// 0x401004: CFA r6+16, rbp offset-16, RA offset-8
	// 0x401007: CFA r7+8, rbp offset-16, RA offset-8
}
