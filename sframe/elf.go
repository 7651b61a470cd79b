package sframe

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
)

// ELF identifiers of SFrame data.
const (
	ptGNUSFrame  = elf.ProgType(0x6474e554)
	shtGNUSFrame = elf.SectionType(0x6ffffff4)
)

// maxSectionSize bounds what FromELF reads: far above any real section
// (a large binary's is a few MiB), far below what would hurt a host.
const maxSectionSize = 256 << 20

// ErrNoSFrame is returned by FromELF and Open for a file without SFrame
// data.
var ErrNoSFrame = errors.New("no SFrame data")

// Open parses the SFrame data of the linked ELF file at path.
func Open(path string) (*Table, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	t, err := Read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// Read parses the SFrame data of the linked ELF file that r holds.
func Read(r io.ReaderAt) (t *Table, err error) {
	// debug/elf is not hardened against hostile files; contain it here.
	defer func() {
		if p := recover(); p != nil {
			t, err = nil, fmt.Errorf("sframe: reading ELF: %v", p)
		}
	}()
	ef, err := elf.NewFile(r)
	if err != nil {
		return nil, fmt.Errorf("sframe: %w", err)
	}
	return FromELF(ef)
}

// FromELF parses the SFrame data of a linked ELF file (ET_EXEC or ET_DYN;
// in relocatable objects the start addresses still need relocations). It
// reads the .sframe section (by type SHT_GNU_SFRAME, else by name), or the
// PT_GNU_SFRAME segment when the file has no section headers: the segment
// may extend past the section into unrelated bytes. FDEs outside every
// executable PT_LOAD are left out (see Table.Errors).
func FromELF(f *elf.File) (t *Table, err error) {
	// debug/elf is not hardened against hostile files; contain it here.
	defer func() {
		if r := recover(); r != nil {
			t, err = nil, fmt.Errorf("sframe: reading ELF: %v", r)
		}
	}()
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return nil, fmt.Errorf("sframe: ELF type %v, want a linked executable or shared object", f.Type)
	}
	data, addr, err := sframeBytes(f)
	if err != nil {
		return nil, err
	}
	t, err = parse(data, addr)
	if err != nil {
		return nil, err
	}
	if want := machineABI(f); want != t.Arch() {
		return nil, fmt.Errorf("sframe: %v section in an ELF file for %v", t.Header.ABI, f.Machine)
	}
	t.keepExecutable(f.Progs)
	t.index()
	return t, nil
}

func machineABI(f *elf.File) Arch {
	switch f.Machine {
	case elf.EM_X86_64:
		return ArchAMD64
	case elf.EM_AARCH64:
		return ArchARM64
	}
	return 0
}

func sframeBytes(f *elf.File) ([]byte, uint64, error) {
	s := findSection(f)
	if s != nil {
		if s.Type == elf.SHT_NOBITS || s.Flags&elf.SHF_COMPRESSED != 0 {
			return nil, 0, fmt.Errorf("sframe: section %s has no plain contents", s.Name)
		}
		data, err := readCapped(s.ReaderAt, s.Size)
		if err != nil {
			return nil, 0, fmt.Errorf("sframe: reading section %s: %w", s.Name, err)
		}
		return data, s.Addr, nil
	}
	for _, p := range f.Progs {
		if p.Type == ptGNUSFrame {
			data, err := readCapped(p.ReaderAt, p.Filesz)
			if err != nil {
				return nil, 0, fmt.Errorf("sframe: reading PT_GNU_SFRAME: %w", err)
			}
			return trimToSection(data), p.Vaddr, nil
		}
	}
	return nil, 0, fmt.Errorf("sframe: %w", ErrNoSFrame)
}

// trimToSection cuts the bytes of a PT_GNU_SFRAME segment to the section
// its header describes: GNU ld can make the segment cover the sections that
// follow (.note.gnu.property, .note.ABI-tag), which are not SFrame padding.
func trimToSection(data []byte) []byte {
	h, _, err := parseHeader(data)
	if err != nil {
		return data // Parse reports the error
	}
	end := uint64(headerSize) + uint64(h.AuxHeaderLen) + uint64(h.FREOff) + uint64(h.FRELen)
	if end < uint64(len(data)) {
		return data[:end]
	}
	return data
}

func findSection(f *elf.File) *elf.Section {
	for _, s := range f.Sections {
		if s.Type == shtGNUSFrame {
			return s
		}
	}
	return f.Section(".sframe")
}

func readCapped(r io.ReaderAt, size uint64) ([]byte, error) {
	if size > maxSectionSize {
		return nil, fmt.Errorf("%d bytes, more than the %d this reader accepts", size, maxSectionSize)
	}
	data := make([]byte, size)
	if _, err := r.ReadAt(data, 0); err != nil {
		return nil, err
	}
	return data, nil
}

// keepExecutable leaves out FDEs whose range is not inside an executable
// PT_LOAD segment.
func (t *Table) keepExecutable(progs []*elf.Prog) {
	kept := t.fdes[:0]
	for _, f := range t.fdes {
		if InExecutable(progs, f.Start, f.End()) {
			kept = append(kept, f)
			continue
		}
		t.Errors = append(t.Errors, formatErr(uint64(f.Offset), t.fdeField(&f, "func_start"), "function [%#x, %#x) is not in an executable segment", f.Start, f.End()))
	}
	t.fdes = kept
}

// InExecutable says [start, end) lies inside an executable PT_LOAD segment
// of progs: the test FromELF applies to each FDE, and that tables built
// from other sources should apply too.
func InExecutable(progs []*elf.Prog, start, end uint64) bool {
	for _, p := range progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && start >= p.Vaddr && end <= p.Vaddr+p.Memsz && p.Vaddr+p.Memsz >= p.Vaddr {
			return true
		}
	}
	return false
}
