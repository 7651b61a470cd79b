package cbf

import (
	"slices"
	"strings"
	"testing"
)

// FuzzDecode feeds arbitrary bytes to both CBF decoders. Whatever the strict
// decoder accepts must survive a re-encode, and the Swift-compatible decoder
// must agree with it and never fail.
func FuzzDecode(f *testing.F) {
	for _, g := range golden {
		f.Add(unhex(f, g.hex))
	}
	for _, s := range []string{"02", "02 80", "02 6f 00 00 05 00", "01 14 12 34 56 78 9a 00", "02 18 7f 8a 10 00 02", "02 10 01 88 00 00"} {
		f.Add(unhex(f, s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		d := Decoder{MaxFrames: 4096}
		frames, n, err := d.Decode(nil, src)
		swift, _, serr := Decoder{MaxFrames: 4096, Swift: true}.Decode(nil, src)
		if serr != nil {
			t.Fatalf("Swift mode failed: %v", serr)
		}
		if n < 0 || n > len(src) {
			t.Fatalf("record length %d of %d bytes", n, len(src))
		}
		if err != nil {
			return
		}
		if !slices.Equal(frames, swift) {
			t.Fatalf("strict %v, Swift %v", frames, swift)
		}
		ws, _ := parseInfo(src[0])
		enc, err := AppendFrames(nil, ws, frames)
		if err != nil {
			t.Fatalf("re-encode %v: %v", frames, err)
		}
		again, m, err := d.Decode(nil, enc)
		if err != nil || m != len(enc) || !slices.Equal(again, frames) {
			t.Fatalf("re-encoded % x decodes to %v, %v; want %v", enc, again, err, frames)
		}
	})
}

// FuzzDecodeImageMap feeds arbitrary bytes to the CIF decoder. A map it
// accepts must re-encode to a map that decodes equal, and every image must
// be found at its base address and by its build ID.
func FuzzDecodeImageMap(f *testing.F) {
	f.Add(unhex(f, wholeMap))
	for _, s := range []string{
		T + "02 09 1000 0100 00 1d 2f73776966742f6c696e75782f7838365f36342f6c6962666f6f2e736f 00 89 0100 0100 00 a1 0a 2f6c69626261722e736f 00",
		T + "01 09 1000 0100 00 84 45 43 4170704b6974",
		T + "01 09 1000 0100 00 84 48 01 494f53757266616365",
		T + "01 09 1000 0100 00 c7 7fffffffffffffc0",
		"01 00 01 0b ffffff00 7fff 00 00",
		T + "02 09 1000 0100 00 3f" + strings.Repeat("2f41", 31) + "41 00 89 0100 0100 00 c0 00 09 2f65787472612e736f 00",
	} {
		f.Add(unhex(f, s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		m, n, err := DecodeImageMap(src)
		if err != nil {
			return
		}
		if n > len(src) {
			t.Fatalf("map length %d of %d bytes", n, len(src))
		}
		for i, im := range m.Images() {
			if got := m.Lookup(im.Base); got != i {
				t.Fatalf("Lookup(0x%x) = %d; want %d", im.Base, got, i)
			}
			if im.BuildID != nil && !slices.Contains(m.ByBuildID(im.BuildID), i) {
				t.Fatalf("image %d not found by build ID", i)
			}
		}
		enc := m.AppendCIF(nil)
		again, _, err := DecodeImageMap(enc)
		if err != nil || !again.Equal(m) {
			t.Fatalf("re-encoded % x: %v, %v; want %v", enc, again, err, m)
		}
	})
}
