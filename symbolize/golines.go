package symbolize

import (
	"debug/elf"
	"debug/gosym"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"

	"github.com/sprof/sprof/stacks"
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
// DWARF, so no inlined frames), so goLines gives the same frames, and
// what the pclntab does not cover (cgo's C code) still goes to the ELF
// symbolizer (see GSYM.goFrame).
type goLines struct {
	mu   sync.Mutex // debug/gosym's tables are not safe for concurrent use
	tab  *gosym.Table
	size int64
}

// frame returns the frame of the Go function at addr, false if the
// pclntab has none there.
func (g *goLines) frame(path string, addr uint64) (stacks.Frame, bool, error) {
	var f stacks.Frame
	var ok bool
	err := contain(path, func() error {
		g.mu.Lock()
		defer g.mu.Unlock()
		file, line, fn := g.tab.PCToLine(addr)
		if fn != nil {
			f, ok = stacks.Frame{Function: fn.Name, File: file, Line: line}, true
		}
		return nil
	})
	return f, ok, err
}

// loadGoLines reads the pclntab of the Go program at path as loadImage
// does. It returns nil when the program has DWARF after all
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
		tab, err := loadGo(ef, st.Size())
		if err != nil || tab == nil {
			return err
		}
		g = &goLines{tab: tab, size: goTableSize(tab)}
		return nil
	})
	return g, err
}
