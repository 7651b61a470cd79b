package symbolize

import (
	"debug/dwarf"
	"debug/elf"
	"debug/gosym"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"github.com/sprof/sprof/internal/elfx"
	"github.com/sprof/sprof/stacks"
	"github.com/sprof/sprof/symbolize/buildid"
	"github.com/sprof/sprof/symbolize/debugfile"
	"github.com/sprof/sprof/symbolize/goinline"
)

// Limits on what one binary may make us read. debug/elf and debug/dwarf
// allocate what a file's headers claim, so every section is checked against
// these and against the file's size before it is read.
const (
	maxSymtabBytes  = 128 << 20 // .symtab/.dynsym and their string tables
	maxPclntabBytes = 512 << 20
	maxDWARFBytes   = 256 << 20 // all .debug_* sections together
	maxDebuglink    = 4 << 10
)

// image is everything known about one binary's code: how file offsets map
// to addresses and the tables that name those addresses.
type image struct {
	loads elfx.Segments
	syms  *symtab
	lines *lineTable   // nil without DWARF line rows
	inl   *inlineTable // nil without DWARF inlined calls
	gol   *goLines     // nil unless a Go program
	// fdes are the function ranges of .eh_frame, for addresses no symbol
	// covers.
	fdes  functionRanges
	bytes int64
}

// frames appends the frames of the instruction at addr, innermost first:
// the functions DWARF says were inlined there, then the function around
// them, from Go's pclntab for Go functions or else the symbol table. The
// innermost frame's position is the line table's (the pclntab's in Go);
// each outer one's is the call site of the frame inside it. An address no
// symbol covers is named after its function's start, when .eh_frame
// knows it (see unnamedFunction).
func (img *image) frames(dst []stacks.Frame, addr uint64, b Binary) ([]stacks.Frame, error) {
	if img.gol != nil {
		// DWARF's inlined calls where it has them, else the pclntab's.
		n := len(dst)
		var ok bool
		var err error
		dst, ok, err = img.gol.frames(dst, b.Path, addr, img.inl == nil)
		if err != nil {
			return dst[:n], err
		}
		if ok {
			if img.inl != nil {
				f := dst[n]
				dst, f.File, f.Line = img.appendInlined(dst[:n], addr, f.File, f.Line)
				dst = append(dst, f)
			}
			return dst, nil
		}
	}
	i := img.syms.lookup(addr)
	if i < 0 {
		if f, ok := img.unnamedFunction(addr, b.Name); ok {
			return append(dst, f), nil
		}
		return dst, nil
	}
	var file string
	var line int
	if img.lines != nil {
		file, line, _ = img.lines.lookup(addr)
	}
	f := img.syms.frame(i)
	dst, f.File, f.Line = img.appendInlined(dst, addr, file, line)
	return append(dst, f), nil
}

// appendInlined appends a frame for each inlined call around addr,
// innermost first, the first at file:line, and returns the call site of
// the outermost: the position within the function they were inlined into.
func (img *image) appendInlined(dst []stacks.Frame, addr uint64, file string, line int) ([]stacks.Frame, string, int) {
	if img.inl == nil {
		return dst, file, line
	}
	for j := img.inl.innermost(addr); j >= 0; j = int(img.inl.ranges[j].parent) {
		r := &img.inl.ranges[j]
		f := stacks.Frame{File: file, Line: line}
		f.Function, f.SystemName = img.inl.names.show(int(r.name))
		dst = append(dst, f)
		file, line = "", int(r.callLine)
		if r.callFile != noFile {
			file = img.inl.files[r.callFile]
		}
	}
	return dst, file, line
}

// contain runs fn, turning a panic into an error naming the file, which
// wraps ErrMalformed (see elfx.Contain).
func contain(name string, fn func() error) error {
	err := elfx.Contain(name, fn)
	if errors.Is(err, elfx.ErrPanicked) {
		return fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return err
}

// loadImage reads the tables of the binary r (of size bytes, named name in
// errors), to show names demangled as dm says. findDebug returns the path
// of its separate debug file, or "". Without withDWARF it reads the symbol
// tables and a Go program's pclntab alone, no lines or inlined calls.
func loadImage(r io.ReaderAt, size int64, name string, dm Demangling, findDebug func(buildID string, link debugfile.Link) string, withDWARF bool) (*image, error) {
	img := &image{}
	var syms []symbol
	var ef *elf.File
	var link debugfile.Link
	hasSymtab := false
	err := contain(name, func() error {
		var err error
		if ef, err = elf.NewFile(r); err != nil {
			return fmt.Errorf("%s: %w: %w", name, ErrMalformed, err)
		}
		img.loads = elfx.LoadSegments(ef)
		hasSymtab = ef.SectionByType(elf.SHT_SYMTAB) != nil
		syms, err = appendSymbols(syms, ef, size)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		img.gol, err = loadGo(ef, size, func() (uint64, bool, error) {
			for _, s := range syms {
				if s.name == "runtime.text" {
					return s.addr, true, nil
				}
			}
			return 0, false, nil
		})
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		link = readDebuglink(ef, size)
		img.fdes = loadFunctionRanges(ef, size)
		return nil
	})
	if err != nil {
		return nil, err
	}

	id, _ := buildid.Read(r)
	var dbg *elf.File
	if p := findDebug(id, link); p != "" {
		f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err == nil {
			defer f.Close()
			// A broken debug file costs its own tables, not the binary's.
			contain(p, func() error {
				st, err := f.Stat()
				if err != nil {
					return err
				}
				d, err := elf.NewFile(f)
				if err != nil {
					return err
				}
				more, err := appendSymbols(syms, d, st.Size())
				if err != nil {
					return err
				}
				syms, dbg = more, d
				if withDWARF {
					img.lines, img.inl = loadDWARF(d, st.Size(), dm, img.gol == nil)
				}
				return nil
			})
		}
	}
	if withDWARF && img.lines == nil && img.inl == nil {
		contain(name, func() error {
			img.lines, img.inl = loadDWARF(ef, size, dm, img.gol == nil)
			return nil
		})
	}
	if !hasSymtab && dbg == nil {
		syms = appendMiniDebugInfo(syms, ef, size, name)
	}

	img.syms = newSymtab(syms, dm)
	img.bytes = img.syms.bytes + int64(len(img.loads))*32 + int64(len(img.fdes))*16
	if img.lines != nil {
		img.bytes += img.lines.size()
	}
	if img.inl != nil {
		img.bytes += img.inl.size()
	}
	if img.gol != nil {
		img.bytes += img.gol.size
	}
	return img, nil
}

// checkSection refuses a section larger than limit or lying outside the
// file, before anything reads it.
func checkSection(s *elf.Section, fileSize int64, limit uint64) error {
	if s.Size > limit {
		return fmt.Errorf("%w: section %s: %d bytes exceed the limit of %d", ErrMalformed, s.Name, s.Size, limit)
	}
	if s.Type != elf.SHT_NOBITS && (s.Offset > uint64(fileSize) || s.FileSize > uint64(fileSize)-s.Offset) {
		return fmt.Errorf("%w: section %s: %d bytes at offset %#x run past the end of the file", ErrMalformed, s.Name, s.FileSize, s.Offset)
	}
	return nil
}

// appendSymbols appends the code symbols of f's .symtab and .dynsym.
func appendSymbols(syms []symbol, f *elf.File, fileSize int64) ([]symbol, error) {
	for _, typ := range []elf.SectionType{elf.SHT_SYMTAB, elf.SHT_DYNSYM} {
		s := f.SectionByType(typ)
		if s == nil {
			continue
		}
		if err := checkSection(s, fileSize, maxSymtabBytes); err != nil {
			return syms, err
		}
		if int(s.Link) < len(f.Sections) {
			if err := checkSection(f.Sections[s.Link], fileSize, maxSymtabBytes); err != nil {
				return syms, err
			}
		}
		var list []elf.Symbol
		var err error
		if typ == elf.SHT_SYMTAB {
			list, err = f.Symbols()
		} else {
			list, err = f.DynamicSymbols()
		}
		if err != nil {
			return syms, fmt.Errorf("%w: section %s: %w", ErrMalformed, s.Name, err)
		}
		for i := range list {
			if sym, ok := codeSymbol(f, &list[i]); ok {
				syms = append(syms, sym)
			}
		}
	}
	return syms, nil
}

// stbGNUUnique is STB_GNU_UNIQUE, a global binding debug/elf does not name.
const stbGNUUnique = elf.SymBind(10)

// codeSymbol converts an ELF symbol that names code in an executable
// section; data, files, sections, undefined and mapping symbols ($x, $d)
// and assembler-local labels (.L) are left out.
func codeSymbol(f *elf.File, s *elf.Symbol) (symbol, bool) {
	var rank int
	switch elf.ST_TYPE(s.Info) {
	case elf.STT_FUNC:
		rank = rankFunc
	case elf.STT_GNU_IFUNC:
		rank = rankIFunc
	case elf.STT_NOTYPE:
		rank = rankLabel
	default:
		return symbol{}, false
	}
	switch elf.ST_BIND(s.Info) {
	case elf.STB_GLOBAL, stbGNUUnique:
		rank += rankGlobal
	case elf.STB_WEAK:
		rank += rankWeak
	}
	if s.Name == "" || s.Name[0] == '$' || strings.HasPrefix(s.Name, ".L") {
		return symbol{}, false
	}
	if s.Section == elf.SHN_UNDEF || s.Section >= elf.SHN_LORESERVE || int(s.Section) >= len(f.Sections) {
		return symbol{}, false
	}
	sec := f.Sections[s.Section]
	const code = elf.SHF_ALLOC | elf.SHF_EXECINSTR
	addr := s.Value
	if f.Machine == elf.EM_ARM {
		addr &^= 1 // the Thumb bit
	}
	if sec.Flags&code != code || addr < sec.Addr || addr-sec.Addr >= sec.Size {
		return symbol{}, false
	}
	return symbol{addr: addr, size: s.Size, limit: sec.Addr + sec.Size, name: s.Name, rank: rank}, true
}

// readDebuglink returns f's .gnu_debuglink, zero if it has none.
func readDebuglink(f *elf.File, fileSize int64) debugfile.Link {
	s := f.Section(".gnu_debuglink")
	if s == nil || checkSection(s, fileSize, maxDebuglink) != nil {
		return debugfile.Link{}
	}
	b, err := s.Data()
	if err != nil {
		return debugfile.Link{}
	}
	link, err := debugfile.ParseLink(b, f.ByteOrder)
	if err != nil {
		return debugfile.Link{}
	}
	return link
}

// loadDWARF reads f's DWARF line tables (if rows is set) and inlined
// calls, nil when it has none or too much.
//
// It reads only the sections that hold them. elf.File.DWARF would read
// and decompress every .debug_* section, location lists and call frames
// too, which in Go programs weigh as much as the rest.
func loadDWARF(f *elf.File, fileSize int64, dm Demangling, rows bool) (*lineTable, *inlineTable) {
	sections := map[string]*elf.Section{}
	var total uint64
	for _, s := range f.Sections {
		name, ok := strings.CutPrefix(s.Name, ".debug_")
		if !ok || !dwarfSection(name) || s.Type == elf.SHT_NOBITS {
			continue
		}
		if checkSection(s, fileSize, maxDWARFBytes) != nil {
			return nil, nil
		}
		total += s.Size
		sections[name] = s
	}
	if sections["info"] == nil || sections["line"] == nil || total > maxDWARFBytes {
		return nil, nil
	}
	data := map[string][]byte{}
	for name, s := range sections {
		b, err := s.Data()
		if err != nil {
			return nil, nil
		}
		data[name] = b
	}
	d, err := dwarf.New(data["abbrev"], nil, nil, data["info"], data["line"], nil, data["ranges"], data["str"])
	if err != nil {
		return nil, nil
	}
	for _, name := range []string{"addr", "line_str", "rnglists", "str_offsets"} {
		if b, ok := data[name]; ok {
			if err := d.AddSection(".debug_"+name, b); err != nil {
				return nil, nil
			}
		}
	}
	return readDWARF(d, codeRanges(f), dm, rows)
}

// dwarfSection reports the DWARF sections (by name after .debug_) that
// functions, inlined calls and line tables need.
func dwarfSection(name string) bool {
	switch name {
	case "abbrev", "info", "str", "line", "ranges", "addr", "line_str", "rnglists", "str_offsets":
		return true
	}
	return false
}

// codeRanges returns a test for addresses inside f's executable sections.
func codeRanges(f *elf.File) func(addr uint64) bool {
	type span struct{ lo, hi uint64 }
	var spans []span
	const code = elf.SHF_ALLOC | elf.SHF_EXECINSTR
	for _, s := range f.Sections {
		if s.Flags&code == code && s.Size > 0 {
			spans = append(spans, span{s.Addr, s.Addr + s.Size})
		}
	}
	return func(addr uint64) bool {
		for _, s := range spans {
			if s.lo <= addr && addr < s.hi {
				return true
			}
		}
		return false
	}
}

// loadGo reads a Go program's pclntab, nil for other binaries. It finds the
// table by section, as `go tool addr2line` does, so stripped Go binaries
// are named too, and where its entries count from by the runtime's own
// record (elfx.GoText), which stripping leaves, so a stripped program
// linked by a C linker is named right too (addr2line names it by the
// functions 256 bytes before); failing that, by the runtime.text symbol
// runtimeText finds, asked only then. The calls inlined at each pc are
// read from the table too where the record gives their base
// (elfx.GoFunc); a program whose record is not found, or whose inline
// trees cannot be read, gets a frame per pc.
func loadGo(f *elf.File, fileSize int64, runtimeText func() (uint64, bool, error)) (*goLines, error) {
	s := f.Section(".gopclntab")
	if s == nil {
		s = f.Section(".data.rel.ro.gopclntab")
	}
	if s == nil || s.Type == elf.SHT_NOBITS {
		return nil, nil
	}
	if err := checkSection(s, fileSize, maxPclntabBytes); err != nil {
		return nil, err
	}
	data, err := s.Data()
	if err != nil {
		return nil, fmt.Errorf("%w: section %s: %w", ErrMalformed, s.Name, err)
	}
	if err := checkPclntab(data); err != nil {
		return nil, fmt.Errorf("%w: section %s: %w", ErrMalformed, s.Name, err)
	}
	// Where the runtime's module record is not found, the linker's
	// runtime.text symbol says where the table counts from.
	text, found := elfx.GoText(f, s, data)
	if !found {
		addr, ok, err := runtimeText()
		if err != nil {
			return nil, err
		}
		if ok {
			text = addr
		}
	}
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, text))
	if err != nil {
		return nil, fmt.Errorf("%w: section %s: %w", ErrMalformed, s.Name, err)
	}
	if len(tab.Funcs) == 0 {
		return nil, nil
	}
	g := &goLines{tab: tab, size: goTableSize(tab)}
	if found {
		g.inl, g.size = loadGoInline(f, fileSize, s, data, text, g.size)
	}
	return g, nil
}

// loadGoInline reads the inline trees of the Go function table pcln (the
// section s) whose entries count from text, and returns them and size
// plus the bytes read for them; nil where they cannot be read (see
// loadGo).
func loadGoInline(f *elf.File, fileSize int64, s *elf.Section, pcln []byte, text uint64, size int64) (*goinline.Table, int64) {
	gofunc, sec, ok := elfx.GoFunc(f, s, pcln)
	if !ok {
		return nil, size
	}
	var funcdata []byte
	if sec == s && gofunc-s.Addr < uint64(len(pcln)) {
		funcdata = pcln[gofunc-s.Addr:] // Go 1.26 puts go:func.* in the table's section
	} else {
		// Only the section's part from gofunc on: Go 1.18 to 1.25 put
		// go:func.* (go.func.* before 1.20) in .rodata, tens of
		// megabytes in a large program.
		if sec.Flags&elf.SHF_COMPRESSED != 0 || checkSection(sec, fileSize, maxPclntabBytes) != nil {
			return nil, size
		}
		funcdata = make([]byte, sec.Size-(gofunc-sec.Addr))
		if _, err := sec.ReadAt(funcdata, int64(gofunc-sec.Addr)); err != nil {
			return nil, size
		}
		size += int64(len(funcdata))
	}
	inl, err := goinline.New(pcln, f.ByteOrder, text, funcdata)
	if err != nil {
		return nil, size
	}
	return inl, size
}

// checkPclntab bounds the function count in a pclntab header before
// debug/gosym allocates a Func for each: every function takes at least 8
// bytes of its function table.
func checkPclntab(b []byte) error {
	if len(b) < 16 {
		return fmt.Errorf("pclntab header: %d bytes is too short", len(b))
	}
	var order binary.ByteOrder
	switch magic := binary.LittleEndian.Uint32(b); {
	case magic >= 0xfffffff0 && magic != 0xffffffff:
		order = binary.LittleEndian
	case binary.BigEndian.Uint32(b) >= 0xfffffff0:
		order = binary.BigEndian
	default:
		return fmt.Errorf("pclntab magic %#x at offset 0 is not Go's", magic)
	}
	var n uint64
	switch b[7] {
	case 4:
		n = uint64(order.Uint32(b[8:]))
	case 8:
		n = order.Uint64(b[8:])
	default:
		return fmt.Errorf("pclntab pointer size %d at offset 7 is not 4 or 8", b[7])
	}
	if n > uint64(len(b))/8 {
		return fmt.Errorf("pclntab function count %d at offset 8 exceeds the table's %d bytes", n, len(b))
	}
	return nil
}

// goTableSize estimates the memory of a gosym.Table: the pclntab it keeps
// plus a Func, a Sym and a name per function.
func goTableSize(t *gosym.Table) int64 {
	n := int64(len(t.Funcs)) * 200
	for i := range t.Funcs {
		n += int64(len(t.Funcs[i].Name))
	}
	if len(t.Funcs) > 0 && t.Funcs[0].LineTable != nil {
		n += int64(len(t.Funcs[0].LineTable.Data))
	}
	return n
}
