package gsym

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// Creator builds a GSYM file: add functions in any order, Finalize, then
// Encode. It follows LLVM's GsymCreator so that files it writes give the
// same lookups in llvm-gsymutil: the same choice among records with equal
// or overlapping ranges, the same string and file tables, the same
// encodings. A Creator is not safe for concurrent use; converters build
// records in parallel and add them from one goroutine.
type Creator struct {
	strs      *stringTable
	files     []fileEntry
	fileIndex map[fileEntry]uint32
	funcs     []FunctionInfo
	base      uint64
	hasBase   bool
	uuid      []byte
	text      []Range // executable address ranges; nil when unknown
	finalized bool
}

type fileEntry struct{ dir, base uint64 }

// NewCreator returns an empty Creator.
func NewCreator() *Creator {
	c := &Creator{strs: newStringTable(), fileIndex: map[fileEntry]uint32{}}
	c.insertFileEntry(fileEntry{})
	return c
}

// SetBaseAddress sets the address the address table is relative to; LLVM
// uses the image base (the first PT_LOAD's virtual address). Without it the
// lowest function start is used.
func (c *Creator) SetBaseAddress(a uint64) { c.base, c.hasBase = a, true }

// SetUUID records the binary's identifier (the GNU build ID for ELF).
func (c *Creator) SetUUID(id []byte) { c.uuid = slices.Clone(id) }

// AddTextRange declares [start, end) as executable; once any is declared,
// functions outside every text range are refused (see ValidTextAddress),
// and a final zero-size function is extended to the end of its range.
func (c *Creator) AddTextRange(r Range) { c.text = AddRange(c.text, r) }

// ValidTextAddress reports whether addr lies in a declared text range, or
// true when none was declared.
func (c *Creator) ValidTextAddress(addr uint64) bool {
	return c.text == nil || rangesContain(c.text, addr)
}

// InsertString adds s to the string table (once) and returns its offset.
func (c *Creator) InsertString(s string) uint64 { return c.strs.insert(s) }

// InsertFile adds a source path to the file table, split into directory
// and base name the way LLVM splits it, and returns its index.
func (c *Creator) InsertFile(p string) uint32 {
	dir, base := splitPath(p)
	return c.insertFileEntry(fileEntry{c.strs.insert(dir), c.strs.insert(base)})
}

func (c *Creator) insertFileEntry(fe fileEntry) uint32 {
	if i, ok := c.fileIndex[fe]; ok {
		return i
	}
	i := uint32(len(c.files))
	c.files = append(c.files, fe)
	c.fileIndex[fe] = i
	return i
}

// NumFiles is the size of the file table so far.
func (c *Creator) NumFiles() int { return len(c.files) }

// NumFunctions is the number of records added (after Finalize: kept).
func (c *Creator) NumFunctions() int { return len(c.funcs) }

// splitPath splits p as llvm::sys::path::parent_path and filename do for
// POSIX paths.
func splitPath(p string) (dir, base string) {
	if p == "" {
		return "", ""
	}
	if strings.HasSuffix(p, "/") && strings.Trim(p, "/") != "" {
		return strings.TrimRight(p, "/"), "."
	}
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return "", p
	}
	base = p[i+1:]
	if base == "" { // p is only slashes
		return "", p
	}
	dir = p[:i]
	// parent_path keeps a root name ("/" or "//net") and drops other
	// trailing separators.
	trimmed := strings.TrimRight(dir, "/")
	if trimmed == "" {
		return "/", base
	}
	if strings.HasPrefix(p, "//") && !strings.HasPrefix(p, "///") && !strings.Contains(trimmed[2:], "/") {
		return trimmed + "/", base
	}
	return trimmed, base
}

// AddFunction adds a record; its strings are interned now, in the order
// LLVM's converters insert them.
func (c *Creator) AddFunction(f FunctionInfo) {
	c.strs.insert(f.Name)
	c.internInline(f.Inline)
	for i := range f.Merged {
		c.strs.insert(f.Merged[i].Name)
		c.internInline(f.Merged[i].Inline)
	}
	for _, cs := range f.CallSites {
		for _, re := range cs.MatchRegex {
			c.strs.insert(re)
		}
	}
	c.funcs = append(c.funcs, f)
}

func (c *Creator) internInline(n *InlineInfo) {
	if n == nil {
		return
	}
	c.strs.insert(n.Name)
	for i := range n.Children {
		c.internInline(&n.Children[i])
	}
}

// FinalizeStats reports what Finalize did.
type FinalizeStats struct {
	Before, After int
	// Overlaps counts pairs of kept records whose ranges overlap.
	Overlaps int
}

// Finalize sorts the records and resolves equal and overlapping ranges as
// LLVM's GsymCreator::finalize does.
func (c *Creator) Finalize() (FinalizeStats, error) {
	if c.finalized {
		return FinalizeStats{}, errors.New("gsym: already finalized")
	}
	c.finalized = true
	st := FinalizeStats{Before: len(c.funcs)}
	if len(c.funcs) > 1 {
		slices.SortStableFunc(c.funcs, func(a, b FunctionInfo) int { return compareFunctions(&a, &b) })
		kept := c.funcs[:1]
		for i := 1; i < len(c.funcs); i++ {
			prev, curr := &kept[len(kept)-1], &c.funcs[i]
			switch {
			case prev.Range == curr.Range:
				// The later record is the richer one, or the later of two
				// different ones. (LLVM after 22 also moves a symbol's
				// mangled name onto the debug-info record; 22, the oracle,
				// keeps the debug-info name.)
				if prev.HasRichInfo() != curr.HasRichInfo() || !equalFunctions(prev, curr) {
					*prev = *curr
				}
			case prev.Range.intersects(curr.Range):
				st.Overlaps++
				kept = append(kept, *curr)
			case prev.Range.Size() == 0 && curr.Range.Contains(prev.Range.Start):
				*prev = *curr
			default:
				kept = append(kept, *curr)
			}
		}
		clear(c.funcs[len(kept):])
		c.funcs = kept
	}
	if n := len(c.funcs); n > 0 && c.funcs[n-1].Range.Size() == 0 {
		last := &c.funcs[n-1]
		for _, r := range c.text {
			if r.Contains(last.Range.Start) {
				last.Range.End = r.End
			}
		}
	}
	st.After = len(c.funcs)
	return st, nil
}

// EncodeOptions chooses the output format.
type EncodeOptions struct {
	// Version is 1 (the default, what LLVM 22 and older read) or 2.
	Version int
	// ByteOrder defaults to little endian; converters pass the binary's.
	ByteOrder binary.ByteOrder
}

func (o EncodeOptions) order() (byteOrder, error) {
	switch o.ByteOrder {
	case nil, binary.LittleEndian:
		return binary.LittleEndian, nil
	case binary.BigEndian:
		return binary.BigEndian, nil
	}
	return nil, fmt.Errorf("gsym: unsupported byte order %v", o.ByteOrder)
}

func (c *Creator) baseAddress() uint64 {
	if c.hasBase {
		return c.base
	}
	return c.funcs[0].Range.Start
}

func (c *Creator) addrOffSize() int {
	d := c.funcs[len(c.funcs)-1].Range.Start - c.baseAddress()
	switch {
	case d <= math.MaxUint8:
		return 1
	case d <= math.MaxUint16:
		return 2
	case d <= math.MaxUint32:
		return 4
	}
	return 8
}

// Encode returns the finalized GSYM file.
func (c *Creator) Encode(opts EncodeOptions) ([]byte, error) {
	if !c.finalized {
		return nil, errors.New("gsym: Creator wasn't finalized prior to encoding")
	}
	if len(c.funcs) == 0 {
		return nil, errors.New("gsym: no functions to encode")
	}
	if len(c.funcs) > math.MaxUint32 {
		return nil, errors.New("gsym: too many FunctionInfos")
	}
	if base := c.baseAddress(); c.funcs[0].Range.Start < base {
		return nil, fmt.Errorf("gsym: function at 0x%x lies below the base address 0x%x", c.funcs[0].Range.Start, base)
	}
	order, err := opts.order()
	if err != nil {
		return nil, err
	}
	switch opts.Version {
	case 0, 1:
		return c.encodeV1(order)
	case 2:
		return c.encodeV2(order)
	}
	return nil, fmt.Errorf("gsym: unsupported GSYM version %d", opts.Version)
}

func (c *Creator) writeAddrOffsets(w *writer, size int) {
	w.align(size)
	base := c.baseAddress()
	for i := range c.funcs {
		w.uint(size, c.funcs[i].Range.Start-base)
	}
}

func (c *Creator) writeFileTable(w *writer) {
	w.u32(uint32(len(c.files)))
	for _, f := range c.files {
		w.uint(w.strpW, f.dir)
		w.uint(w.strpW, f.base)
	}
}

func (c *Creator) encodeV1(order byteOrder) ([]byte, error) {
	if len(c.uuid) > maxUUIDV1 {
		return nil, fmt.Errorf("gsym: UUID of %d bytes does not fit version 1 (max %d)", len(c.uuid), maxUUIDV1)
	}
	if len(c.strs.data) > math.MaxUint32 {
		return nil, errors.New("gsym: string table size exceeded 32-bit max")
	}
	w := &writer{order: order, strpW: 4, strs: c.strs}
	aos := c.addrOffSize()
	w.u32(Magic)
	w.u16(1)
	w.u8(uint8(aos))
	w.u8(uint8(len(c.uuid)))
	w.u64(c.baseAddress())
	w.u32(uint32(len(c.funcs)))
	strtabAt := len(w.b)
	w.u32(0)
	w.u32(0)
	var uuid [maxUUIDV1]byte
	copy(uuid[:], c.uuid)
	w.b = append(w.b, uuid[:]...)
	c.writeAddrOffsets(w, aos)
	w.align(4)
	infoAt := len(w.b)
	w.b = append(w.b, make([]byte, 4*len(c.funcs))...)
	w.align(4)
	c.writeFileTable(w)
	strtabOff := len(w.b)
	w.b = append(w.b, c.strs.data...)
	order.PutUint32(w.b[strtabAt:], uint32(strtabOff))
	order.PutUint32(w.b[strtabAt+4:], uint32(len(c.strs.data)))
	for i := range c.funcs {
		w.align(4)
		if len(w.b) > math.MaxUint32 {
			return nil, errors.New("gsym: address info offset exceeded 32-bit max")
		}
		order.PutUint32(w.b[infoAt+4*i:], uint32(len(w.b)))
		if err := w.appendFunction(&c.funcs[i], true); err != nil {
			return nil, err
		}
	}
	return w.b, nil
}

func (c *Creator) encodeV2(order byteOrder) ([]byte, error) {
	w := &writer{order: order, strpW: 8, strs: c.strs}
	aos := c.addrOffSize()
	n := len(c.funcs)
	// FunctionInfo records are encoded first, into their own buffer, so
	// the directory can give every section's size.
	fw := &writer{order: order, strpW: 8, strs: c.strs}
	infoOffs := make([]uint64, n)
	for i := range c.funcs {
		fw.align(4)
		infoOffs[i] = uint64(len(fw.b))
		if err := fw.appendFunction(&c.funcs[i], true); err != nil {
			return nil, err
		}
	}
	type section struct {
		typ  uint32
		off  uint64
		size uint64
	}
	var dir []section
	if len(c.uuid) > 0 {
		dir = append(dir, section{typ: gdUUID})
	}
	dir = append(dir, section{typ: gdAddrOffsets}, section{typ: gdAddrInfoOffsets},
		section{typ: gdFileTable}, section{typ: gdStringTable}, section{typ: gdFunctionInfo})
	w.u32(Magic)
	w.u16(2)
	w.u8(uint8(aos))
	w.u8(0)
	w.u64(c.baseAddress())
	w.u32(uint32(n))
	dirAt := len(w.b)
	w.b = append(w.b, make([]byte, (len(dir)+1)*dirEntrySize)...)
	for i := range dir {
		s := &dir[i]
		switch s.typ {
		case gdUUID:
			s.off = uint64(len(w.b))
			w.b = append(w.b, c.uuid...)
		case gdAddrOffsets:
			w.align(aos)
			s.off = uint64(len(w.b))
			c.writeAddrOffsets(w, aos)
		case gdAddrInfoOffsets:
			w.align(8)
			s.off = uint64(len(w.b))
			for _, o := range infoOffs {
				w.u64(o)
			}
		case gdFileTable:
			w.align(4)
			s.off = uint64(len(w.b))
			c.writeFileTable(w)
		case gdStringTable:
			s.off = uint64(len(w.b))
			w.b = append(w.b, c.strs.data...)
		case gdFunctionInfo:
			w.align(4)
			s.off = uint64(len(w.b))
			w.b = append(w.b, fw.b...)
		}
		s.size = uint64(len(w.b)) - s.off
	}
	for i, s := range dir {
		at := dirAt + i*dirEntrySize
		order.PutUint32(w.b[at:], s.typ)
		order.PutUint64(w.b[at+4:], s.off)
		order.PutUint64(w.b[at+12:], s.size)
	}
	return w.b, nil
}

// WriteFile encodes the GSYM file and writes it to path atomically: into a
// temporary file in the same directory, renamed over path once complete, so
// a crash never leaves half a file behind.
func (c *Creator) WriteFile(p string, opts EncodeOptions) error {
	data, err := c.Encode(opts)
	if err != nil {
		return err
	}
	return writeFileAtomic(p, data)
}

func writeFileAtomic(p string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(p), "."+path.Base(p)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", p, err)
	}
	return nil
}

// NewCreatorFrom returns a Creator holding everything r holds, with the
// same string table, file table and records, so that encoding it again
// reproduces a file LLVM wrote byte for byte (or converts between versions
// and byte orders).
func NewCreatorFrom(r *Reader) (*Creator, error) {
	c := NewCreator()
	c.strs.data = append(c.strs.data[:0], r.strtab...)
	if len(c.strs.data) == 0 || c.strs.data[0] != 0 {
		c.strs.data = append([]byte{0}, c.strs.data...)
	}
	if c.strs.data[len(c.strs.data)-1] != 0 {
		c.strs.data = append(c.strs.data, 0)
	}
	for off := 1; off < len(c.strs.data); {
		end := off + slices.Index(c.strs.data[off:], 0)
		s := string(c.strs.data[off:end])
		if _, dup := c.strs.offs[s]; !dup && s != "" {
			c.strs.offs[s] = uint64(off)
		}
		off = end + 1
	}
	for i := uint32(1); i < r.numFiles; i++ {
		d, b, _ := r.file(i)
		c.files = append(c.files, fileEntry{d, b})
		if _, dup := c.fileIndex[fileEntry{d, b}]; !dup {
			c.fileIndex[fileEntry{d, b}] = i
		}
	}
	c.SetBaseAddress(r.hdr.BaseAddress)
	c.SetUUID(r.hdr.UUID)
	for i := 0; i < r.NumFunctions(); i++ {
		f, err := r.FunctionInfo(i)
		if err != nil {
			return nil, fmt.Errorf("function %d: %w", i, err)
		}
		c.AddFunction(f)
	}
	return c, nil
}
