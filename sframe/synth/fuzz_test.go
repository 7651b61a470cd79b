package synth

import (
	"debug/elf"
	"encoding/binary"
	"testing"

	"github.com/sprof/sprof/sframe"
	"github.com/sprof/sprof/sframe/cfi"
)

// FuzzSynthesize synthesizes tables from arbitrary .eh_frame bytes for
// both architectures. Whatever the CFI says, the table must be valid:
// Synthesize must not fail, and every version's encoding must parse back
// to the same functions (V3: the same rows).
func FuzzSynthesize(f *testing.F) {
	for _, bin := range []string{"chain-amd64-v1", "chain-arm64-v3", "flex-amd64-v3", "asm-arm64-v3"} {
		ef, err := elf.Open(fixtures + bin)
		if err != nil {
			f.Fatal(err)
		}
		data, err := ef.Section(".eh_frame").Data()
		ef.Close()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(bin[6] == 'r', data)
	}
	f.Fuzz(func(t *testing.T, arm64 bool, data []byte) {
		abi := sframe.ABIAMD64LE
		if arm64 {
			abi = sframe.ABIAArch64LE
		}
		fr, err := cfi.Parse(cfi.Section{Kind: cfi.EHFrame, Data: data, Order: binary.LittleEndian, AddrSize: 8, Bases: cfi.Bases{Section: 0x1000}})
		if err != nil {
			t.Fatal(err)
		}
		tab, st, err := Synthesize(abi, fr)
		if err != nil {
			t.Fatalf("Synthesize: %v", err)
		}
		if st.CoveredBytes > st.Bytes || st.Functions != len(tab.FDEs()) {
			t.Fatalf("covered %d of %d bytes, %d functions for %d FDEs", st.CoveredBytes, st.Bytes, st.Functions, len(tab.FDEs()))
		}
		for v := sframe.Version1; v <= sframe.Version3; v++ {
			enc, err := tab.Encode(v, 0)
			if err != nil {
				continue // V1/V2: functions too far from 0, V1: PCMASK not 16
			}
			back, err := sframe.Parse(enc, 0)
			if err != nil || len(back.Errors) != 0 || len(back.FDEs()) != len(tab.FDEs()) {
				t.Fatalf("V%d: %v, %v, %d FDEs of %d", v, err, back.Errors, len(back.FDEs()), len(tab.FDEs()))
			}
			if v != sframe.Version3 {
				continue
			}
			for i := range tab.FDEs() {
				a, b := tab.Rows(&tab.FDEs()[i]), back.Rows(&back.FDEs()[i])
				if len(a) != len(b) {
					t.Fatalf("FDE %d: %d rows, %d back", i, len(a), len(b))
				}
				for j := range a {
					if a[j] != b[j] {
						t.Fatalf("FDE %d row %d: %+v, back %+v", i, j, a[j], b[j])
					}
				}
			}
		}
	})
}
