package elfx

import (
	"bytes"
	"debug/elf"
	"os"
	"testing"
)

// FuzzRead: whatever the bytes, Read returns; reading sections, program
// headers, symbols, the Go check, the Go text's start and gofunc through
// it never panics out.
func FuzzRead(f *testing.F) {
	for _, path := range []string{"/bin/true", os.Args[0]} {
		if b, err := os.ReadFile(path); err == nil && len(b) < 64<<20 {
			f.Add(b[:min(len(b), 4096)])
		}
	}
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		Read(bytes.NewReader(data), "fuzz", func(ef *elf.File) error {
			IsGo(ef)
			ss := LoadSegments(ef)
			ss.Vaddr(0x1000)
			ss.Bias(0x7f00_0000_0000, 0x1000)
			for _, s := range ef.Sections {
				if s.Size < 1<<20 {
					if data, err := s.Data(); err == nil && s.Name == ".gopclntab" {
						GoText(ef, s, data)
						GoFunc(ef, s, data)
					}
				}
			}
			ef.Symbols()
			return nil
		})
	})
}
