package goruntime

import (
	"bytes"
	"debug/elf"
	"os"
	"testing"

	"github.com/sprof/sprof/internal/elfx"
)

// FuzzRead: whatever the file, Read returns, through elfx.Read as the
// collector calls it, and a Runtime it returns has a non-empty morestack
// range.
func FuzzRead(f *testing.F) {
	if b, err := os.ReadFile(os.Args[0]); err == nil && len(b) < 64<<20 {
		f.Add(b) // a Go binary: this test's
	}
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		elfx.Read(r, "fuzz", func(ef *elf.File) error {
			rt, err := Read(ef, r)
			if err != nil {
				return err
			}
			if rt.MorestackEnd <= rt.MorestackStart {
				t.Errorf("morestack [%#x, %#x)", rt.MorestackStart, rt.MorestackEnd)
			}
			return nil
		})
	})
}
