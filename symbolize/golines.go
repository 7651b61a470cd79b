package symbolize

import (
	"bytes"
	"debug/elf"
	"debug/gosym"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"

	"github.com/sprof/sprof/stacks"
	"github.com/sprof/sprof/symbolize/goinline"
)

// goLines is a Go program's pclntab, which names its Go functions: in the
// ELF symbolizer's image of the program, and alone for GSYM.
//
// GSYM names the functions of a Go program built without DWARF but with
// its symbol table (Go's own tools, go, compile and link; programs linked
// with -ldflags=-w) from its pclntab alone. Their GSYM files, converted
// from the symbol table, have no lines, so every lookup would ask the ELF
// symbolizer, which loads the whole symbol table as well as the pclntab:
// 28.7 MB of heap for compile's against 16.5, again after every eviction. For such a
// program the ELF symbolizer answers from the pclntab alone anyway (no
// DWARF; the inlined calls from the pclntab's inline trees), so goLines
// gives the same frames, and what the pclntab does not cover (cgo's C
// code) still goes to the ELF symbolizer (see GSYM.goFrames).
type goLines struct {
	mu    sync.Mutex // debug/gosym's tables are not safe for concurrent use
	tab   *gosym.Table
	inl   *goinline.Table // nil where the inline trees cannot be read
	calls []goinline.Call // Calls' buffer, under mu
	size  int64
}

// frames appends the frames of the Go code at addr, innermost first: with
// inlined, a frame for each call the compiler inlined there (each at the
// call site of the one inside it, the first at addr's position), then the
// function holding addr; false, appending none, if the pclntab has no
// function there. Inline trees that cannot be read cost their frames, not
// the function's.
func (g *goLines) frames(dst []stacks.Frame, path string, addr uint64, inlined bool) ([]stacks.Frame, bool, error) {
	var ok bool
	err := contain(path, func() error {
		g.mu.Lock()
		defer g.mu.Unlock()
		file, line, fn := g.tab.PCToLine(addr)
		if fn == nil {
			return nil
		}
		ok = true
		if inlined && g.inl != nil {
			var err error
			g.calls, err = g.inl.Calls(g.calls[:0], addr)
			if err == nil {
				for _, c := range g.calls {
					dst = append(dst, stacks.Frame{Function: c.Function, File: file, Line: line})
					file, line, _ = g.tab.PCToLine(c.Site)
				}
			}
		}
		dst = append(dst, stacks.Frame{Function: fn.Name, File: file, Line: line})
		return nil
	})
	return dst, ok, err
}

// loadGoLines reads the pclntab of the Go program at path as loadImage
// does, with runtime.text from the symbol table, which it scans without
// loading, for where the runtime's module record is not found. It
// returns nil when the program has DWARF after all
// (hasDWARF, given the file), which the ELF symbolizer would read for
// inlined frames, or no usable pclntab.
func loadGoLines(path string, hasDWARF func(r io.ReaderAt, f *elf.File, size int64) bool) (*goLines, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	var g *goLines
	err = contain(path, func() error {
		ef, err := elf.NewFile(f)
		if err != nil {
			return fmt.Errorf("%s: %w: %w", path, ErrMalformed, err)
		}
		if hasDWARF(f, ef, st.Size()) {
			return nil
		}
		g, err = loadGo(ef, st.Size(), func() (uint64, bool, error) {
			s, ok, err := findCodeSymbol(ef, st.Size(), "runtime.text")
			return s.addr, ok, err
		})
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		return nil
	})
	return g, err
}

// findCodeSymbol finds the first code symbol (see codeSymbol) called name
// in f's .symtab by scanning its entries in place: debug/elf's Symbols
// would make a string of every name, megabytes for a Go program. The
// .dynsym is not searched: Go's runtime symbols are not dynamic.
func findCodeSymbol(f *elf.File, fileSize int64, name string) (symbol, bool, error) {
	s := f.SectionByType(elf.SHT_SYMTAB)
	if s == nil || int(s.Link) >= len(f.Sections) {
		return symbol{}, false, nil
	}
	strs := f.Sections[s.Link]
	for _, sec := range []*elf.Section{s, strs} {
		if err := checkSection(sec, fileSize, maxSymtabBytes); err != nil {
			return symbol{}, false, err
		}
	}
	data, err := s.Data()
	if err != nil {
		return symbol{}, false, fmt.Errorf("%w: section %s: %w", ErrMalformed, s.Name, err)
	}
	str, err := strs.Data()
	if err != nil {
		return symbol{}, false, fmt.Errorf("%w: section %s: %w", ErrMalformed, strs.Name, err)
	}
	want := append([]byte(name), 0)
	size := 24
	if f.Class == elf.ELFCLASS32 {
		size = 16
	}
	// Entry 0 is the null symbol.
	for off := size; off+size <= len(data); off += size {
		e := data[off : off+size]
		n := uint64(f.ByteOrder.Uint32(e))
		if n >= uint64(len(str)) || !bytes.HasPrefix(str[n:], want) {
			continue
		}
		sym := elf.Symbol{Name: name}
		if size == 24 {
			sym.Info, sym.Other = e[4], e[5]
			sym.Section = elf.SectionIndex(f.ByteOrder.Uint16(e[6:]))
			sym.Value, sym.Size = f.ByteOrder.Uint64(e[8:]), f.ByteOrder.Uint64(e[16:])
		} else {
			sym.Value, sym.Size = uint64(f.ByteOrder.Uint32(e[4:])), uint64(f.ByteOrder.Uint32(e[8:]))
			sym.Info, sym.Other = e[12], e[13]
			sym.Section = elf.SectionIndex(f.ByteOrder.Uint16(e[14:]))
		}
		if cs, ok := codeSymbol(f, &sym); ok {
			return cs, true, nil
		}
	}
	return symbol{}, false, nil
}
