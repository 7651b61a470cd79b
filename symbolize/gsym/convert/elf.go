package convert

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sync"
	"syscall"

	"github.com/sprof/sprof/symbolize/debugfile"
	"github.com/sprof/sprof/symbolize/gsym"
)

// Options tune a conversion. The zero value does what llvm-gsymutil
// --convert does, with debug files looked up under /usr/lib/debug.
type Options struct {
	// DebugDirs are searched for separate debug files, by build ID
	// (DIR/.build-id/xx/rest.debug) and by .gnu_debuglink name
	// (DIR/<binary's directory>/NAME). Default: /usr/lib/debug.
	DebugDirs []string
	// Workers bounds the goroutines converting compilation units;
	// 0 means GOMAXPROCS.
	Workers int
	// Progress, when set, is called after each compilation unit.
	Progress func(done, total int)
	// Context, when set, ends the conversion when it is done: no unit is
	// started after, and ELF returns its error.
	Context context.Context
	// MaxSectionSize caps the size of a debug section read into memory
	// (after decompression); 0 means 4 GiB.
	MaxSectionSize uint64
}

// Stats describes a finished conversion, as llvm-gsymutil reports it.
type Stats struct {
	// DebugFile is the separate debug file used, "" when the binary
	// carried its own DWARF.
	DebugFile   string
	FromDWARF   int
	FromSymtab  int
	Pruned      int
	Total       int
	ByteOrder   binary.ByteOrder
	HasDWARF    bool
	NumOverlaps int
}

// ELF converts the ELF binary at path: its DWARF (or that of its separate
// debug file) and its symbol table, finalized. Encode the result with
// Creator.Encode using Stats.ByteOrder to write what llvm-gsymutil writes.
func ELF(path string, opts Options) (c *gsym.Creator, st Stats, err error) {
	var maps [][]byte
	defer func() {
		// debug/elf is not hardened against hostile input; a panic in it
		// (or in this package) is an error in this file, not a crash.
		if p := recover(); p != nil {
			c, err = nil, fmt.Errorf("convert %s: malformed ELF or DWARF: %v", path, p)
			return // leaving the files mapped: goroutines may read them still
		}
		for _, m := range maps {
			syscall.Munmap(m)
		}
	}()
	// A fault reading a mapped file (truncated under us) is a panic.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	bin, err := elf.Open(path)
	if err != nil {
		return nil, st, fmt.Errorf("convert %s: %w", path, err)
	}
	defer bin.Close()
	binMap, err := mapFile(path)
	if err != nil {
		return nil, st, fmt.Errorf("convert %s: %w", path, err)
	}
	maps = append(maps, binMap)
	c = gsym.NewCreator()
	st.ByteOrder = bin.ByteOrder
	if base, ok := imageBase(bin); ok {
		c.SetBaseAddress(base)
	}
	for _, s := range bin.Sections {
		if s.Flags&elf.SHF_EXECINSTR != 0 && s.Size > 0 {
			c.AddTextRange(gsym.Range{Start: s.Addr, End: s.Addr + s.Size})
		}
	}
	id := buildID(bin)
	c.SetUUID(id)

	dbg, dbgMap := bin, binMap
	if !hasDWARF(bin) {
		if p := findDebugFile(bin, path, id, opts.DebugDirs); p != "" {
			df, err := elf.Open(p)
			if err != nil {
				return nil, st, fmt.Errorf("convert %s: debug file %s: %w", path, p, err)
			}
			defer df.Close()
			if dbgMap, err = mapFile(p); err != nil {
				return nil, st, fmt.Errorf("convert %s: debug file: %w", path, err)
			}
			maps = append(maps, dbgMap)
			dbg, st.DebugFile = df, p
		}
	}
	symFile, symMap := bin, binMap
	if bin.Section(".symtab") == nil && dbg.Section(".symtab") != nil {
		symFile, symMap = dbg, dbgMap
	}
	// The symbol table is read while the DWARF is converted; its functions
	// are added after DWARF's, as LLVM adds them.
	syms := make(chan []gsym.FunctionInfo, 1)
	go func() {
		var fs []gsym.FunctionInfo
		catch(func() error { fs = funcSymbols(c, symFile, symMap); return nil })
		syms <- fs
	}()
	if hasDWARF(dbg) {
		st.HasDWARF = true
		if st.FromDWARF, err = dwarfFunctions(c, dbg, dbgMap, opts); err != nil {
			<-syms
			return nil, st, fmt.Errorf("convert %s: %w", path, err)
		}
	}
	symFuncs := <-syms
	for _, f := range symFuncs {
		c.AddFunction(f)
	}
	st.FromSymtab = len(symFuncs)
	fs, err := c.Finalize()
	if err != nil {
		return nil, st, err
	}
	st.Pruned, st.Total, st.NumOverlaps = fs.Before-fs.After, fs.After, fs.Overlaps
	return c, st, nil
}

// dwarfFunctions adds the functions of f's DWARF; mapped is f's file.
func dwarfFunctions(c *gsym.Creator, f *elf.File, mapped []byte, opts Options) (int, error) {
	d, err := loadDWARF(f, mapped, opts.MaxSectionSize)
	if err != nil {
		return 0, err
	}
	ctx := opts.Context
	if ctx == nil {
		ctx = context.Background()
	}
	return convertDWARF(ctx, c, d, opts.Workers, opts.Progress)
}

// mapFile maps the file at path read-only; nil for an empty file.
func mapFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() <= 0 || fi.Size() != int64(int(fi.Size())) {
		return nil, nil
	}
	m, err := syscall.Mmap(int(f.Fd()), 0, int(fi.Size()), syscall.PROT_READ, syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", path, err)
	}
	return m, nil
}

// imageBase is the first PT_LOAD segment's virtual address, LLVM's GSYM
// base address for ELF.
func imageBase(f *elf.File) (uint64, bool) {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			return p.Vaddr, true
		}
	}
	return 0, false
}

func hasDWARF(f *elf.File) bool {
	return f.Section(".debug_info") != nil || f.Section(".zdebug_info") != nil
}

// funcSymbols returns a bare FunctionInfo for each function symbol of
// .symtab that lies in a text range of c; Finalize drops those DWARF also
// describes. It reads the table in place in mapped (f's file), creating
// names only for the functions kept: Go binaries have tens of thousands of
// symbols.
func funcSymbols(c *gsym.Creator, f *elf.File, mapped []byte) []gsym.FunctionInfo {
	symtab := f.SectionByType(elf.SHT_SYMTAB)
	if symtab == nil || symtab.Link == 0 || int(symtab.Link) >= len(f.Sections) {
		return nil
	}
	data, ok := sectionBytes(mapped, symtab)
	strs, ok2 := sectionBytes(mapped, f.Sections[symtab.Link])
	entSize := 24
	if f.Class == elf.ELFCLASS32 {
		entSize = 16
	}
	if !ok || !ok2 || len(data)%entSize != 0 {
		return nil
	}
	// Two passes: the first counts, so the result is allocated once.
	order := f.ByteOrder
	var out []gsym.FunctionInfo
	for pass := 0; pass < 2; pass++ {
		n := 0
		// The first entry is the null symbol.
		for e := entSize; e+entSize <= len(data); e += entSize {
			sym := data[e : e+entSize]
			var info uint8
			var value, size uint64
			if entSize == 24 {
				info, value, size = sym[4], order.Uint64(sym[8:]), order.Uint64(sym[16:])
			} else {
				info, value, size = sym[12], uint64(order.Uint32(sym[4:])), uint64(order.Uint32(sym[8:]))
			}
			if elf.ST_TYPE(info) != elf.STT_FUNC || !c.ValidTextAddress(value) {
				continue
			}
			if pass == 0 {
				n++
				continue
			}
			if name := symbolName(strs, order.Uint32(sym)); name != "" {
				out = append(out, gsym.FunctionInfo{Range: gsym.Range{Start: value, End: value + size}, Name: name})
			}
		}
		if pass == 0 {
			out = make([]gsym.FunctionInfo, 0, n)
		}
	}
	return out
}

// symbolName is the NUL-terminated string at off, "" when there is none,
// as debug/elf reads symbol names.
func symbolName(strs []byte, off uint32) string {
	if uint64(off) >= uint64(len(strs)) {
		return ""
	}
	s := strs[off:]
	i := bytes.IndexByte(s, 0)
	if i < 0 {
		return ""
	}
	return string(s[:i])
}

// sectionBytes is the contents of an uncompressed section in mapped, its
// file, false when it has none there.
func sectionBytes(mapped []byte, s *elf.Section) ([]byte, bool) {
	end := s.Offset + s.FileSize
	if s.Type == elf.SHT_NOBITS || s.Flags&elf.SHF_COMPRESSED != 0 || end < s.Offset || end > uint64(len(mapped)) {
		return nil, false
	}
	return mapped[s.Offset:end:end], true
}

// buildID returns the GNU build ID note's payload, nil when there is none.
func buildID(f *elf.File) []byte {
	for _, s := range f.Sections {
		if s.Type != elf.SHT_NOTE || s.Size > 1<<20 {
			continue
		}
		data, err := s.Data()
		if err != nil {
			continue
		}
		for len(data) >= 12 {
			namesz := f.ByteOrder.Uint32(data)
			descsz := f.ByteOrder.Uint32(data[4:])
			typ := f.ByteOrder.Uint32(data[8:])
			nameEnd := 12 + (uint64(namesz)+3)&^3
			descEnd := nameEnd + (uint64(descsz)+3)&^3
			if descEnd > uint64(len(data)) {
				break
			}
			if typ == 3 && namesz == 4 && string(data[12:15]) == "GNU" {
				return bytes.Clone(data[nameEnd : nameEnd+uint64(descsz)])
			}
			data = data[descEnd:]
		}
	}
	return nil
}

// findDebugFile looks for the binary's separate debug file by build ID and
// then by .gnu_debuglink, with the search the ELF symbolizer uses (see
// symbolize/debugfile).
func findDebugFile(f *elf.File, binPath string, id []byte, dirs []string) string {
	req := debugfile.Request{BuildID: hex.EncodeToString(id), DebugDirs: dirs}
	if len(dirs) == 0 {
		req.DebugDirs = nil
	}
	if s := f.Section(".gnu_debuglink"); s != nil && s.Size <= maxDebuglink {
		if data, err := s.Data(); err == nil {
			req.Link, _ = debugfile.ParseLink(data, f.ByteOrder)
		}
	}
	if abs, err := filepath.Abs(binPath); err == nil {
		req.BinaryDirs = []string{filepath.Dir(abs)}
	}
	return debugfile.Find(req)
}

// inflateSection decompresses a SHF_COMPRESSED section into dst: zlib
// straight from mapped when that holds it, else through debug/elf, which
// also knows zstd.
func inflateSection(f *elf.File, mapped []byte, s *elf.Section, dst []byte) error {
	hdr := uint64(24) // Elf64_Chdr: type, reserved, size, alignment
	if f.Class == elf.ELFCLASS32 {
		hdr = 12
	}
	end := s.Offset + s.FileSize
	if s.Type == elf.SHT_NOBITS || end < s.Offset || end > uint64(len(mapped)) || s.FileSize < hdr ||
		elf.CompressionType(f.ByteOrder.Uint32(mapped[s.Offset:])) != elf.COMPRESS_ZLIB {
		_, err := io.ReadFull(s.Open(), dst)
		return err
	}
	return zlibInflate(dst, mapped[s.Offset+hdr:end])
}

// maxDebuglink bounds the .gnu_debuglink section read: a file name and a CRC.
const maxDebuglink = 4 << 10

// dwarfSections are the sections the converter reads; locations, frames
// and types are never decompressed.
var dwarfSections = []string{"abbrev", "info", "str", "line", "ranges", "addr", "line_str", "rnglists", "str_offsets"}

// loadDWARF reads f's DWARF, decompressing (SHF_COMPRESSED or .zdebug)
// the sections it needs once each, in parallel. Uncompressed sections are
// used in place when f's file is mapped (mapped not nil), sparing a copy
// and the page faults of fresh memory, which cost much in VMs.
func loadDWARF(f *elf.File, mapped []byte, maxSize uint64) (*dwarfData, error) {
	if maxSize == 0 {
		maxSize = 4 << 30
	}
	data := make([][]byte, len(dwarfSections))
	errs := make([]error, len(dwarfSections))
	var wg sync.WaitGroup
	for i, name := range dwarfSections {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if f.Type == elf.ET_REL {
				mapped = nil // relocate writes into the sections
			}
			data[i], errs[i] = debugSection(f, mapped, name, maxSize)
			if errs[i] == nil && f.Type == elf.ET_REL {
				errs[i] = relocate(f, name, data[i])
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	sect := func(name string) []byte { return data[slices.Index(dwarfSections, name)] }
	d := &dwarfData{
		info: sect("info"), abbrev: sect("abbrev"), str: sect("str"), lineStr: sect("line_str"),
		strOffsets: sect("str_offsets"), addr: sect("addr"), ranges: sect("ranges"),
		rnglists: sect("rnglists"), line: sect("line"), order: f.ByteOrder,
	}
	if err := newDWARFData(d); err != nil {
		return nil, fmt.Errorf("read DWARF: %w", err)
	}
	return d, nil
}

// relocate applies the relocations of an object file's .debug_NAME
// section: in object files, references between debug sections are
// relocations against section symbols. Only the absolute relocations
// compilers use there, for x86-64 and arm64, are known.
func relocate(f *elf.File, name string, data []byte) error {
	var target int
	for i, s := range f.Sections {
		if s.Name == ".debug_"+name {
			target = i
		}
	}
	if target == 0 || data == nil {
		return nil
	}
	var syms []elf.Symbol
	for _, rs := range f.Sections {
		if rs.Type != elf.SHT_RELA || int(rs.Info) != target {
			continue
		}
		if f.Class != elf.ELFCLASS64 {
			return fmt.Errorf(".debug_%s: relocations of 32-bit objects are not supported", name)
		}
		if syms == nil {
			var err error
			if syms, err = f.Symbols(); err != nil {
				return fmt.Errorf(".debug_%s relocations: %w", name, err)
			}
		}
		rels, err := rs.Data()
		if err != nil {
			return fmt.Errorf("%s: %w", rs.Name, err)
		}
		for len(rels) >= 24 {
			off := f.ByteOrder.Uint64(rels)
			info := f.ByteOrder.Uint64(rels[8:])
			addend := f.ByteOrder.Uint64(rels[16:])
			rels = rels[24:]
			sym, typ := info>>32, uint32(info)
			if sym == 0 || sym > uint64(len(syms)) {
				continue
			}
			s := syms[sym-1]
			if s.Section == elf.SHN_UNDEF || s.Section >= elf.SHN_LORESERVE {
				continue
			}
			size := 0
			switch {
			case f.Machine == elf.EM_X86_64 && typ == uint32(elf.R_X86_64_64),
				f.Machine == elf.EM_AARCH64 && typ == uint32(elf.R_AARCH64_ABS64):
				size = 8
			case f.Machine == elf.EM_X86_64 && typ == uint32(elf.R_X86_64_32),
				f.Machine == elf.EM_AARCH64 && typ == uint32(elf.R_AARCH64_ABS32):
				size = 4
			default:
				return fmt.Errorf("%s: relocation type %d of %v is not supported", rs.Name, typ, f.Machine)
			}
			if off > uint64(len(data)) || uint64(len(data))-off < uint64(size) {
				return fmt.Errorf("%s: relocation at %#x outside .debug_%s", rs.Name, off, name)
			}
			if v := s.Value + addend; size == 8 {
				f.ByteOrder.PutUint64(data[off:], v)
			} else {
				f.ByteOrder.PutUint32(data[off:], uint32(v))
			}
		}
	}
	return nil
}

// debugSection returns the contents of .debug_NAME or .zdebug_NAME.
// An uncompressed section is a slice of mapped, the file mapped in memory,
// when that is not nil.
func debugSection(f *elf.File, mapped []byte, name string, maxSize uint64) ([]byte, error) {
	if s := f.Section(".debug_" + name); s != nil && s.Type != elf.SHT_NOBITS {
		if b, ok := sectionBytes(mapped, s); ok {
			return b, nil
		}
		// Size is the decompressed size for SHF_COMPRESSED sections: trust
		// it no further than zlib's best ratio allows.
		limit := min(maxSize, s.FileSize)
		if s.Flags&elf.SHF_COMPRESSED != 0 {
			limit = min(maxSize, s.FileSize*1032+64)
		}
		if s.Size > limit {
			return nil, fmt.Errorf(".debug_%s claims %d bytes, more than %d", name, s.Size, limit)
		}
		b := make([]byte, s.Size)
		if err := inflateSection(f, mapped, s, b); err != nil {
			return nil, fmt.Errorf("read .debug_%s: %w", name, err)
		}
		return b, nil
	}
	s := f.Section(".zdebug_" + name)
	if s == nil {
		return nil, nil
	}
	// The raw bytes: debug/elf's Data would inflate them already.
	raw, ok := sectionBytes(mapped, s)
	if !ok {
		if s.Type == elf.SHT_NOBITS || s.ReaderAt == nil || s.FileSize > maxSize {
			return nil, fmt.Errorf(".zdebug_%s: %d bytes, no data or over the cap", name, s.FileSize)
		}
		raw = make([]byte, s.FileSize)
		if _, err := s.ReadAt(raw, 0); err != nil {
			return nil, fmt.Errorf(".zdebug_%s: %w", name, err)
		}
	}
	if len(raw) < 12 || string(raw[:4]) != "ZLIB" {
		return nil, errors.New(".zdebug_" + name + ": missing ZLIB header")
	}
	size := binary.BigEndian.Uint64(raw[4:12])
	if size > maxSize || size > uint64(len(raw))*1032+64 {
		return nil, fmt.Errorf(".zdebug_%s decompresses to %d bytes, over the cap", name, size)
	}
	b := make([]byte, size)
	if err := zlibInflate(b, raw[12:]); err != nil {
		return nil, fmt.Errorf(".zdebug_%s: %w", name, err)
	}
	return b, nil
}
