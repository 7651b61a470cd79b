package synth_test

import (
	"debug/elf"
	"fmt"
	"log"
	"os"

	"github.com/sprof/sprof/sframe"
	"github.com/sprof/sprof/sframe/synth"
)

// Build the SFrame table of a binary from its .eh_frame, look up a PC in
// it, and encode it as a V2 section.
func ExampleFromELF() {
	ef, err := elf.Open("../../testdata/sframe/asm-amd64-v1")
	if err != nil {
		log.Fatal(err)
	}
	defer ef.Close()
	tab, st, err := synth.FromELF(ef)
	if err != nil {
		log.Fatal(err)
	}
	if err := st.WriteText(os.Stdout); err != nil {
		log.Fatal(err)
	}
	if r, ok := tab.Lookup(0x401005); ok {
		fmt.Println(tab.Describe(r))
	}
	sec, err := tab.Encode(sframe.Version2, 0)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(sec), "bytes of SFrame V2")
	// Output:
	// FDEs: 2 (0 from .debug_frame), bad: 0; CFI rows: 7
	// rows left out: 0
	// PLT expressions: 0; FDEs left out: 0 overlapping, 0 outside code
	// code covered: 17 of 17 bytes (100.00%)
	// table: 2 functions, 7 rows; .eh_frame_hdr: not checked (no search table)
	// func 0x401000 size 8, row +4 cfa=fp+16 ra=*(cfa-8) fp=*(cfa-16)
	// 92 bytes of SFrame V2
}
