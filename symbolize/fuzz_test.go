package symbolize

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/sprof/sprof/symbolize/debugfile"
)

// FuzzLoadImage feeds arbitrary bytes as an ELF file through the boundary
// around debug/elf, debug/dwarf, debug/gosym and xz, then looks up a few
// offsets: nothing may panic or escape the caps.
func FuzzLoadImage(f *testing.F) {
	for _, name := range []string{"c-O2", "c-minidebug", "c-debuglink"} {
		b, err := os.ReadFile(fixture(name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
		f.Add(b[:4096])
	}
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	noDebug := func(string, debugfile.Link) string { return "" }
	f.Fuzz(func(t *testing.T, b []byte) {
		img, err := loadImage(bytes.NewReader(b), int64(len(b)), "fuzz", DemangleFull, noDebug, true)
		if err != nil {
			return
		}
		for _, off := range []uint64{0, 0x40, 0x1000, 0x1080, 0x1350, uint64(len(b) / 2)} {
			if addr, ok := img.loads.Vaddr(off); ok {
				if _, err := img.frames(nil, addr, Binary{Path: "fuzz", Name: "fuzz"}); err != nil && !strings.Contains(err.Error(), "fuzz") {
					t.Fatalf("error does not name the file: %v", err)
				}
			}
		}
	})
}

func FuzzReadKallsyms(f *testing.F) {
	f.Add("ffffffff81000000 T _stext\nffffffff81000010 t f\t[mod]\n", "mod 4096 0 - Live 0xffffffff81000000\n")
	f.Add("0000000000000000 T x\n", "")
	f.Add("ffff D d\nffff T t\n", "m 1 0 - Live 0x0 (OE)\n")
	f.Fuzz(func(t *testing.T, s, modules string) {
		k, err := ReadKallsyms(strings.NewReader(s), strings.NewReader(modules))
		if err != nil {
			return
		}
		for _, a := range []uint64{0, 0xffff, 0xffffffff81000008, ^uint64(0)} {
			k.Symbolize(nil, a)
		}
	})
}
