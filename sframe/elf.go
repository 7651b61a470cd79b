package sframe

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/sprof/sprof/internal/elfx"
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

// Open parses the SFrame data of the linked ELF file at path, or the file
// itself when it is a raw SFrame section (it starts with the SFrame magic,
// as what objcopy --dump-section and `sprof sframe synth` write does) at
// address 0.
func Open(path string) (*Table, error) { return OpenAt(path, 0) }

// OpenAt is Open with the address of a raw section: the address it is to
// have, which its function addresses are relative to. An ELF file's
// section has its own address; addr is ignored for it.
func OpenAt(path string, addr uint64) (*Table, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	t, err := readELFOrSection(f, addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// readELFOrSection reads an ELF file or a raw section.
func readELFOrSection(f *os.File, addr uint64) (*Table, error) {
	var head [2]byte
	if n, _ := f.ReadAt(head[:], 0); n < len(head) ||
		binary.LittleEndian.Uint16(head[:]) != magic && binary.BigEndian.Uint16(head[:]) != magic {
		return Read(f)
	}
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	data, err := readCapped(f, uint64(st.Size()))
	if err != nil {
		return nil, fmt.Errorf("sframe: raw section: %w", err)
	}
	return Parse(data, addr)
}

// Read parses the SFrame data of the linked ELF file that r holds.
func Read(r io.ReaderAt) (t *Table, err error) {
	err = elfx.Contain("sframe", func() error {
		ef, err := elf.NewFile(r)
		if err != nil {
			return elfError(r, err)
		}
		t, err = FromELF(ef)
		return err
	})
	if err != nil {
		return nil, err
	}
	return t, nil
}

// elfError puts debug/elf's error err about r in words that say what is
// wrong with the file: not ELF at all, or cut short, and then which table
// runs past its end, since debug/elf passes a bare io.EOF through. err stays
// wrapped for errors.Is and errors.As.
func elfError(r io.ReaderAt, err error) error {
	var magic [4]byte
	if n, _ := r.ReadAt(magic[:], 0); n < len(magic) || string(magic[:]) != elf.ELFMAG {
		return fmt.Errorf("sframe: not an ELF file: %w", err)
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("sframe: malformed ELF file: %w", err)
	}
	for _, t := range elfTables(r) {
		if t.size == 0 {
			continue
		}
		end := t.off + t.size
		if end < t.off || end > 1<<62 {
			return fmt.Errorf("sframe: malformed ELF file: %s at offset %#x (%d bytes) is out of range: %w", t.name, t.off, t.size, err)
		}
		var b [1]byte
		if _, rerr := r.ReadAt(b[:], int64(end-1)); rerr != nil {
			return fmt.Errorf("sframe: truncated ELF file: reading %s at offset %#x (%d bytes): %w", t.name, t.off, t.size, err)
		}
	}
	return fmt.Errorf("sframe: truncated ELF file: %w", err)
}

// elfTable is a run of bytes debug/elf.NewFile reads.
type elfTable struct {
	name      string
	off, size uint64
}

// elfTables lists, in the order debug/elf.NewFile reads them, the ELF
// header, the program and section header tables and the section name
// table, as far as the bytes of r describe them.
func elfTables(r io.ReaderAt) []elfTable {
	var ident [elf.EI_NIDENT]byte
	if _, err := r.ReadAt(ident[:], 0); err != nil {
		return []elfTable{{"ELF header", 0, elf.EI_NIDENT}}
	}
	var bo binary.ByteOrder = binary.LittleEndian
	if elf.Data(ident[elf.EI_DATA]) == elf.ELFDATA2MSB {
		bo = binary.BigEndian
	}
	hr := io.NewSectionReader(r, 0, 1<<62)
	var phoff, shoff uint64
	var phentsize, phnum, shentsize, shnum, shstrndx uint16
	var is64 bool
	switch elf.Class(ident[elf.EI_CLASS]) {
	case elf.ELFCLASS32:
		var h elf.Header32
		if binary.Read(hr, bo, &h) != nil {
			return []elfTable{{"ELF header", 0, uint64(binary.Size(h))}}
		}
		phoff, shoff = uint64(h.Phoff), uint64(h.Shoff)
		phentsize, phnum, shentsize, shnum, shstrndx = h.Phentsize, h.Phnum, h.Shentsize, h.Shnum, h.Shstrndx
	case elf.ELFCLASS64:
		var h elf.Header64
		if binary.Read(hr, bo, &h) != nil {
			return []elfTable{{"ELF header", 0, uint64(binary.Size(h))}}
		}
		phoff, shoff = h.Phoff, h.Shoff
		phentsize, phnum, shentsize, shnum, shstrndx = h.Phentsize, h.Phnum, h.Shentsize, h.Shnum, h.Shstrndx
		is64 = true
	default:
		return nil
	}
	tables := []elfTable{
		{"program headers", phoff, uint64(phnum) * uint64(phentsize)},
		{"section headers", shoff, uint64(shnum) * uint64(shentsize)},
	}
	at := shoff + uint64(shstrndx)*uint64(shentsize)
	if shstrndx >= shnum || at > 1<<62 {
		return tables
	}
	sr := io.NewSectionReader(r, int64(at), 1<<62)
	if is64 {
		var sh elf.Section64
		if binary.Read(sr, bo, &sh) == nil {
			tables = append(tables, elfTable{"section name table", sh.Off, sh.Size})
		}
	} else {
		var sh elf.Section32
		if binary.Read(sr, bo, &sh) == nil {
			tables = append(tables, elfTable{"section name table", uint64(sh.Off), uint64(sh.Size)})
		}
	}
	return tables
}

// FromELF parses the SFrame data of a linked ELF file (ET_EXEC or ET_DYN;
// in relocatable objects the start addresses still need relocations). It
// reads the .sframe section (by type SHT_GNU_SFRAME, else by name), or the
// PT_GNU_SFRAME segment when the file has no section headers: the segment
// may extend past the section into unrelated bytes. FDEs outside every
// executable PT_LOAD are left out (see Table.Errors).
func FromELF(f *elf.File) (t *Table, err error) {
	err = elfx.Contain("sframe", func() error {
		t, err = fromELF(f)
		return err
	})
	if err != nil {
		return nil, err
	}
	return t, nil
}

func fromELF(f *elf.File) (*Table, error) {
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return nil, fmt.Errorf("sframe: ELF type %v, want a linked executable or shared object", f.Type)
	}
	data, addr, err := sframeBytes(f)
	if err != nil {
		return nil, err
	}
	t, err := parse(data, addr)
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
