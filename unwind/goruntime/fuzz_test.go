package goruntime

import (
	"bytes"
	"debug/elf"
	"os"
	"testing"

	"github.com/sprof/sprof/internal/elfx"
)

// FuzzRead: whatever the file, ReadCode and Code.Runtime return, through
// elfx.Read as the collector calls them, with a non-empty morestack range
// and roots.
func FuzzRead(f *testing.F) {
	if b, err := os.ReadFile(os.Args[0]); err == nil && len(b) < 64<<20 {
		f.Add(b) // a Go binary: this test's
	}
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		elfx.Read(r, "fuzz", func(ef *elf.File) error {
			code, err := ReadCode(ef)
			if err != nil {
				return err
			}
			for _, r := range append(code.Roots, code.Morestack) {
				if r.End <= r.Start {
					t.Errorf("empty range %#x in %+v", r, code)
				}
			}
			rt, err := code.Runtime(ef, r)
			if err != nil {
				return err
			}
			if rt.Morestack != code.Morestack {
				t.Errorf("morestack %#x, code's %#x", rt.Morestack, code.Morestack)
			}
			return nil
		})
	})
}
