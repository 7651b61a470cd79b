package elfx

import "debug/elf"

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
// checked to lie in f's code. found is false where none is found: before
// Go 1.16, whose record began otherwise; a PIE whose linker left the
// record's words for the loader to fill (lld writes no addends into the
// file by default); a malformed file. text is then .text's start, which a
// caller with the symbol table can better by runtime.text's symbol.
func GoText(f *elf.File, pcln *elf.Section, data []byte) (text uint64, found bool) {
	if text, ok := moduleText(f, pcln, data); ok {
		return text, true
	}
	if s := f.Section(".text"); s != nil {
		return s.Addr, false
	}
	return 0, false
}

// moduleText returns the text word of f's Go module record (see GoText).
func moduleText(f *elf.File, pcln *elf.Section, data []byte) (uint64, bool) {
	if len(data) < 8 {
		return 0, false
	}
	ptr := int(data[7])
	if ptr != 4 && ptr != 8 {
		return 0, false
	}
	word := func(b []byte, i int) uint64 {
		if ptr == 4 {
			return uint64(f.ByteOrder.Uint32(b[i*4:]))
		}
		return f.ByteOrder.Uint64(b[i*8:])
	}
	// The record's words: 0 the table, 1-3 the function name slice, then
	// four more slices and the find table, 20-21 the lowest and highest
	// function pc, 22-23 text and etext.
	const words = 24
	valid := func(b []byte) bool {
		if len(b) < words*ptr || word(b, 0) != pcln.Addr {
			return false
		}
		names := word(b, 1)
		minpc, maxpc, text, etext := word(b, 20), word(b, 21), word(b, 22), word(b, 23)
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
		if name == ".go.module" {
			if valid(b) {
				return word(b, 22), true
			}
			continue
		}
		for off := 0; off+words*ptr <= len(b); off += ptr {
			if valid(b[off:]) {
				return word(b[off:], 22), true
			}
		}
	}
	return 0, false
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
