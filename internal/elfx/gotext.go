package elfx

import (
	"cmp"
	"debug/elf"
	"slices"
)

// maxModuleScan bounds the bytes of a data section GoText reads looking
// for the runtime's module record.
const maxModuleScan = 64 << 20

// GoText returns runtime.text, the address the function entries of f's
// Go function table count from; pcln is the table's section and data its
// bytes. Where only Go's linker wrote the program, that is the start of
// .text, which debug/gosym is usually given. Where a C linker linked it
// (cgo, -linkmode=external), C start-up code comes first in .text (256
// bytes of it in a Go 1.26 amd64 program linked by GNU ld), and a table
// read from .text's start names every address by the function that far
// before it; `go tool addr2line` does so for such a program once
// stripped. The runtime itself reads the address from its module record
// (runtime.moduledata, whose first word points at the table): that
// record is found here by that word, in .go.module, where Go 1.26's
// linker puts it, or else among the data of .noptrdata and
// .data.rel.ro, where earlier ones did, with its text and etext words
// checked to lie in f's code. In a PIE the record's words are relocations
// the loader applies: GNU ld also writes their values into the file, lld
// leaves zeros there, so where the file's words do not make a record,
// its dynamic relocations' addends are read instead (see relocated).
// found is false where none is found: before Go 1.16, whose record began
// otherwise; a malformed file. text is then .text's start, which a caller
// with the symbol table can better by runtime.text's symbol.
func GoText(f *elf.File, pcln *elf.Section, data []byte) (text uint64, found bool) {
	if m, ok := findModule(f, pcln, data); ok {
		return m.word(moduleText), true
	}
	if s := f.Section(".text"); s != nil {
		return s.Addr, false
	}
	return 0, false
}

// GoFunc returns the runtime's gofunc (the linker's go:func.* symbol),
// the address the offsets of the function table's funcdata count from,
// such as those of its inline trees: from the module record GoText finds,
// in a table of Go 1.18 or later (magic 0xfffffff0 or 0xfffffff1; funcdata
// were pointers before). The record keeps it right after its rodata word,
// the start of Go's read-only data, which is word 37 in Go 1.18 and 1.19,
// 39 from Go 1.20 (which added two words before it) to 1.26, and 42 in Go
// 1.27 (which added three more) under 1.20's magic: the first of those of
// the table's magic whose rodata lies in .rodata and whose gofunc lies at
// or above it, in a section of f that holds data, which GoFunc returns
// too. ok is false where none does.
func GoFunc(f *elf.File, pcln *elf.Section, data []byte) (gofunc uint64, in *elf.Section, ok bool) {
	if len(data) < 4 {
		return 0, nil, false
	}
	var words []int
	switch f.ByteOrder.Uint32(data) {
	case go118Magic:
		words = []int{moduleRodata118}
	case go120Magic:
		words = []int{moduleRodata, moduleRodata127}
	default:
		return 0, nil, false
	}
	m, ok := findModule(f, pcln, data)
	rodata := f.Section(".rodata")
	if !ok || rodata == nil {
		return 0, nil, false
	}
	for _, at := range words {
		if len(m.b) < (at+2)*m.ptr {
			break
		}
		start, gofunc := m.word(at), m.word(at+1)
		if start < rodata.Addr || start-rodata.Addr >= rodata.Size || gofunc < start {
			continue
		}
		for _, s := range f.Sections {
			if s.Type == elf.SHT_PROGBITS && s.Flags&elf.SHF_ALLOC != 0 && s.Flags&elf.SHF_EXECINSTR == 0 &&
				gofunc >= s.Addr && gofunc-s.Addr < s.Size {
				return gofunc, s, true
			}
		}
	}
	return 0, nil, false
}

// go118Magic begins the function tables of Go 1.18 and 1.19, go120Magic
// those of Go 1.20 and later.
const (
	go118Magic = 0xfffffff0
	go120Magic = 0xfffffff1
)

// The words of the module record (runtime.moduledata) read here: 0 the
// table, 1-3 the function name slice, then four more slices and the find
// table, 20-21 the lowest and highest function pc, 22-23 text and etext;
// rodata and then gofunc, at 37 in Go 1.18 and 1.19, 39 from Go 1.20
// (which added the coverage counters before them) to 1.26, or 42 (Go 1.27
// added the type descriptors' length and the itab table's offset and size
// before them).
const (
	moduleTable = 0
	moduleNames = 1
	moduleMinPC = 20
	moduleMaxPC = 21
	moduleText  = 22
	moduleEtext = 23
	// The rodata word, gofunc after it: in Go 1.18 and 1.19, up to Go
	// 1.26, and in 1.27.
	moduleRodata118 = 37
	moduleRodata    = 39
	moduleRodata127 = 42
	// moduleWords are the words every record this package accepts has.
	moduleWords = moduleEtext + 1
)

// module is the runtime's module record: its bytes, from its start to the
// end of the section holding it, of ptr-byte words in f's byte order.
type module struct {
	f   *elf.File
	b   []byte
	ptr int
}

func (m module) word(i int) uint64 {
	if m.ptr == 4 {
		return uint64(m.f.ByteOrder.Uint32(m.b[i*4:]))
	}
	return m.f.ByteOrder.Uint64(m.b[i*8:])
}

// findModule finds f's Go module record (see GoText): in the file's
// bytes, else in them as the loader relocates them.
func findModule(f *elf.File, pcln *elf.Section, data []byte) (module, bool) {
	if len(data) < 8 {
		return module{}, false
	}
	if m, ok := scanModule(f, pcln, data, nil); ok {
		return m, true
	}
	if data[7] != 8 {
		return module{}, false // relativeRelocations reads 64-bit files alone
	}
	if rel := relativeRelocations(f); len(rel) > 0 {
		return scanModule(f, pcln, data, rel)
	}
	return module{}, false
}

// relocation is a relative relocation: the loader writes the load address
// plus addend at at.
type relocation struct{ at, addend uint64 }

// scanModule looks for f's module record in the sections that may hold
// it, their words at the addresses in rel replaced by rel's values.
func scanModule(f *elf.File, pcln *elf.Section, data []byte, rel []relocation) (module, bool) {
	ptr := int(data[7])
	if ptr != 4 && ptr != 8 {
		return module{}, false
	}
	valid := func(m module) bool {
		if len(m.b) < moduleWords*ptr || m.word(moduleTable) != pcln.Addr {
			return false
		}
		names := m.word(moduleNames)
		minpc, maxpc, text, etext := m.word(moduleMinPC), m.word(moduleMaxPC), m.word(moduleText), m.word(moduleEtext)
		return names >= pcln.Addr && names < pcln.Addr+uint64(len(data)) &&
			text <= minpc && minpc <= maxpc && maxpc <= etext && inCode(f, text, etext)
	}
	for _, name := range []string{".go.module", ".noptrdata", ".data.rel.ro"} {
		s := f.Section(name)
		if s == nil || s.Type == elf.SHT_NOBITS || s.Size > maxModuleScan {
			continue
		}
		b, err := s.Data()
		if err != nil {
			continue
		}
		if rel != nil {
			b = relocated(f, s, b, rel)
		}
		if name == ".go.module" {
			if m := (module{f, b, ptr}); valid(m) {
				return m, true
			}
			continue
		}
		for off := 0; off+moduleWords*ptr <= len(b); off += ptr {
			if m := (module{f, b[off:], ptr}); valid(m) {
				return m, true
			}
		}
	}
	return module{}, false
}

// maxRelocations bounds the dynamic relocations relativeRelocations
// reads: a large PIE has a few hundred thousand.
const maxRelocations = 1 << 22

// relativeRelocations returns f's relative relocations (R_X86_64_RELATIVE,
// R_AARCH64_RELATIVE) sorted by the address they relocate; none for a
// file that is not a 64-bit PIE of those machines, or whose relocation
// sections hold more than maxRelocations entries.
func relativeRelocations(f *elf.File) []relocation {
	var relative uint32
	switch f.Machine {
	case elf.EM_X86_64:
		relative = uint32(elf.R_X86_64_RELATIVE)
	case elf.EM_AARCH64:
		relative = uint32(elf.R_AARCH64_RELATIVE)
	default:
		return nil
	}
	if f.Type != elf.ET_DYN || f.Class != elf.ELFCLASS64 {
		return nil
	}
	var rel []relocation
	entries := uint64(0)
	for _, s := range f.Sections {
		if s.Type != elf.SHT_RELA || s.Flags&elf.SHF_ALLOC == 0 {
			continue
		}
		if entries += s.Size / 24; entries > maxRelocations {
			return nil
		}
		b, err := s.Data()
		if err != nil {
			continue
		}
		for off := 0; off+24 <= len(b); off += 24 {
			if uint32(f.ByteOrder.Uint64(b[off+8:])) == relative {
				rel = append(rel, relocation{f.ByteOrder.Uint64(b[off:]), f.ByteOrder.Uint64(b[off+16:])})
			}
		}
	}
	slices.SortFunc(rel, func(a, b relocation) int { return cmp.Compare(a.at, b.at) })
	return rel
}

// relocated returns a copy of b, the bytes of section s, with each 8-byte
// word that one of rel (sorted) relocates replaced by its value.
func relocated(f *elf.File, s *elf.Section, b []byte, rel []relocation) []byte {
	c := make([]byte, len(b))
	copy(c, b)
	i, _ := slices.BinarySearchFunc(rel, s.Addr, func(r relocation, at uint64) int { return cmp.Compare(r.at, at) })
	for ; i < len(rel) && rel[i].at-s.Addr < uint64(len(c)); i++ {
		if off := rel[i].at - s.Addr; off%8 == 0 && off+8 <= uint64(len(c)) {
			f.ByteOrder.PutUint64(c[off:], rel[i].addend)
		}
	}
	return c
}

// inCode reports whether [start, end) lies in one executable segment of
// f.
func inCode(f *elf.File, start, end uint64) bool {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && start >= p.Vaddr && end <= p.Vaddr+p.Memsz && start < end {
			return true
		}
	}
	return false
}
