// Package elfx is sprof's one boundary with debug/elf for files it does
// not trust: the binaries of every process on a host. debug/elf says it is
// not hardened against hostile input and may panic; Read and Contain turn
// such a panic into an error naming the file. It also answers, once for
// every reader, the questions they would otherwise each answer their own
// way: is this a Go program (IsGo), where does its function table count
// from (GoText), and which file offset is which address (Segments).
package elfx

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
)

// ErrPanicked is wrapped by the error of a panic Read or Contain
// recovered: the file is malformed in a way debug/elf did not check.
var ErrPanicked = errors.New("the parser panicked")

// Read calls fn with the ELF file r, named name in errors. A panic in
// debug/elf, or in fn while it reads f, is returned as an error.
func Read(r io.ReaderAt, name string, fn func(*elf.File) error) error {
	return Contain(name, func() error {
		f, err := elf.NewFile(r)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return fn(f)
	})
}

// Contain runs fn, turning a panic into an error naming the file name:
// for readers of debug/elf, debug/dwarf and debug/gosym, none of which
// is hardened against hostile files.
func Contain(name string, fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%s: %w: %v", name, ErrPanicked, p)
		}
	}()
	return fn()
}

// IsGo reports whether f is a Go program, by the sections the Go linker
// writes: its pcln table (also in PIE builds' .data.rel.ro) survives
// stripping, its build ID note and build info do too. Go code keeps frame
// pointers, and its own symbol table names its functions.
func IsGo(f *elf.File) bool {
	for _, s := range f.Sections {
		switch s.Name {
		case ".gopclntab", ".data.rel.ro.gopclntab", ".note.go.buildid", ".go.buildinfo":
			return true
		}
	}
	return false
}

// Segment is one PT_LOAD program header that maps file bytes.
type Segment struct {
	Off, Filesz, Vaddr uint64
	Exec               bool
}

// Segments are a binary's PT_LOAD headers: what turns the file offsets
// and runtime addresses a profiler sees into the virtual addresses its
// tables use.
type Segments []Segment

// LoadSegments returns f's PT_LOAD headers that map file bytes.
func LoadSegments(f *elf.File) Segments {
	var ss Segments
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Filesz > 0 {
			ss = append(ss, Segment{Off: p.Off, Filesz: p.Filesz, Vaddr: p.Vaddr, Exec: p.Flags&elf.PF_X != 0})
		}
	}
	return ss
}

// Vaddr converts file offset off to the virtual address the binary's
// tables use. Executable segments win where segments share file pages.
func (ss Segments) Vaddr(off uint64) (uint64, bool) {
	var addr uint64
	found := false
	for _, s := range ss {
		if off < s.Off || off-s.Off >= s.Filesz {
			continue
		}
		if s.Exec {
			return off - s.Off + s.Vaddr, true
		}
		if !found {
			addr, found = off-s.Off+s.Vaddr, true
		}
	}
	return addr, found
}

// FileOffset converts an address in an executable segment back to the
// file offset it is loaded from.
func (ss Segments) FileOffset(addr uint64) (uint64, bool) {
	for _, s := range ss {
		if s.Exec && addr >= s.Vaddr && addr-s.Vaddr < s.Filesz {
			return addr - s.Vaddr + s.Off, true
		}
	}
	return 0, false
}

// Bias returns what to subtract from a runtime address in a mapping of
// the file, at start from file offset offset, to get the virtual address:
// the mapping's start less the address its offset has in the executable
// segment that holds it. The kernel maps from the page that holds a
// segment's first byte, so the mapping's offset may lie up to a page
// before the segment's. Without such a segment, offsets are addresses.
func (ss Segments) Bias(start, offset uint64) uint64 {
	for _, s := range ss {
		if s.Exec && s.Off&^0xfff <= offset && offset < s.Off+s.Filesz {
			return start - offset + s.Off - s.Vaddr
		}
	}
	return start - offset
}
