package symbolize

import (
	"bytes"
	"debug/elf"
	"fmt"
	"io"

	"github.com/ulikunitz/xz"
)

// Bounds for MiniDebugInfo: the compressed section and what it may expand
// to. Real ones hold a small symbol table and weigh kilobytes to a few
// megabytes.
const (
	maxMiniDebugXZ  = 16 << 20
	maxMiniDebugELF = 64 << 20
)

// appendMiniDebugInfo appends the function symbols of f's MiniDebugInfo:
// Fedora and others keep a `.gnu_debugdata` section, an xz-compressed ELF
// file whose .symtab names the local functions that stripping removed from
// the binary's own tables. A broken section costs only its own symbols.
func appendMiniDebugInfo(syms []symbol, f *elf.File, fileSize int64, name string) []symbol {
	s := f.Section(".gnu_debugdata")
	if s == nil || checkSection(s, fileSize, maxMiniDebugXZ) != nil {
		return syms
	}
	contain(name+" .gnu_debugdata", func() error {
		packed, err := s.Data()
		if err != nil {
			return err
		}
		raw, err := unxz(packed, maxMiniDebugELF)
		if err != nil {
			return err
		}
		mini, err := elf.NewFile(bytes.NewReader(raw))
		if err != nil {
			return err
		}
		more, err := appendSymbols(syms, mini, int64(len(raw)))
		if err != nil {
			return err
		}
		syms = more
		return nil
	})
	return syms
}

// unxz decompresses b, refusing output beyond limit bytes.
func unxz(b []byte, limit int64) ([]byte, error) {
	r, err := xz.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("xz: %w", err)
	}
	var out bytes.Buffer
	n, err := io.Copy(&out, io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("xz: %w", err)
	}
	if n > limit {
		return nil, fmt.Errorf("xz: output exceeds the limit of %d bytes", limit)
	}
	return out.Bytes(), nil
}
