package gsym

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

const (
	// Magic is "GSYM" read as a 32-bit integer in the file's byte order.
	Magic        = 0x4753594d
	magicSwapped = 0x4d595347

	headerV1Size = 48
	headerV2Size = 20
	dirEntrySize = 20
	maxUUIDV1    = 20
)

// Global data section types of a version 2 file's directory.
const (
	gdEndOfList       = 0
	gdAddrOffsets     = 1
	gdAddrInfoOffsets = 2
	gdStringTable     = 3
	gdFileTable       = 4
	gdFunctionInfo    = 5
	gdUUID            = 6
)

// Header holds the fields of a GSYM header common to both versions.
type Header struct {
	Version      uint16
	AddrOffSize  uint8
	BaseAddress  uint64
	NumAddresses uint32
	UUID         []byte
	// ByteOrder is the order of the file's fixed-width integers.
	ByteOrder binary.ByteOrder
	// StrtabOffset and StrtabSize locate the string table.
	StrtabOffset, StrtabSize uint64
}

// Reader answers lookups from a GSYM file of version 1 or 2 in either byte
// order. Only the header and table bounds are checked when it is opened;
// each FunctionInfo is decoded when a lookup lands on it, so opening a large
// file costs almost nothing and a lookup touches a few pages.
//
// Strings in results point into the file's memory: they stay valid until
// Close. Copy them (strings.Clone) to keep them longer. A Reader is safe for
// concurrent lookups.
type Reader struct {
	data  []byte
	unmap func() error
	le    bool
	hdr   Header

	addrOffs []byte // NumAddresses × AddrOffSize
	infoOffs []byte // NumAddresses × 4 (V1, absolute) or 8 (V2, relative)
	infoBase uint64 // V2: offset of the FunctionInfo section
	infoEnd  uint64 // end of the bytes a FunctionInfo may occupy
	files    []byte // NumFiles × 2 × strp
	numFiles uint32
	strtab   []byte
	strp     int // width of string offsets: 4 (V1) or 8 (V2)
	cache    recordCache
	index    addrIndex
	// sorted reports an address table in ascending order, as every
	// writer makes it; only such a table is indexed and merged with a
	// batch's sorted addresses.
	sorted bool

	batches sync.Pool // of *batch, with the buffers of an earlier batch

	filesOnce sync.Once
	fileStrs  atomic.Pointer[[]fileStr]
}

// Open maps the GSYM file at path into memory and returns a Reader for it.
func Open(path string) (*Reader, error) { return OpenVerified(path, nil) }

// OpenVerified is Open for a file that holds a GSYM file in an envelope
// of its caller's, such as a checksum: verify is given the mapped bytes
// and returns the GSYM file within them, or an error that Open returns.
// A nil verify takes the file as it is.
func OpenVerified(path string, verify func(data []byte) ([]byte, error)) (*Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := st.Size()
	if size < headerV2Size {
		return nil, fmt.Errorf("open %s: %w", path, formatErr(0, "Header", "file is %d bytes, too short for a GSYM header", size))
	}
	if int64(int(size)) != size {
		return nil, fmt.Errorf("open %s: file too large to map", path)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", path, err)
	}
	file := data
	if verify != nil {
		if file, err = verify(data); err != nil {
			syscall.Munmap(data)
			return nil, fmt.Errorf("open %s: %w", path, err)
		}
	}
	r, err := NewReader(file)
	if err != nil {
		syscall.Munmap(data)
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	r.unmap = func() error { return syscall.Munmap(data) }
	return r, nil
}

// Close releases the file mapping; results' strings become invalid. It
// must not run concurrently with lookups; lookups after it find nothing.
func (r *Reader) Close() error {
	if r.unmap == nil {
		return nil
	}
	err := r.unmap()
	r.unmap, r.data, r.addrOffs, r.infoOffs, r.files, r.strtab = nil, nil, nil, nil, nil, nil
	r.hdr.NumAddresses, r.numFiles, r.infoEnd = 0, 0, 0
	r.cache = newRecordCache(0)
	r.index = addrIndex{}
	r.sorted = false
	r.fileStrs.Store(nil)
	return err
}

// NewReader returns a Reader over a GSYM file held in memory. The Reader
// and the strings of its results refer to data, which must not change.
func NewReader(data []byte) (*Reader, error) {
	if len(data) < 6 {
		return nil, formatErr(0, "Magic", "file too short")
	}
	r := &Reader{data: data}
	switch binary.LittleEndian.Uint32(data) {
	case Magic:
		r.le = true
		r.hdr.ByteOrder = binary.LittleEndian
	case magicSwapped:
		r.hdr.ByteOrder = binary.BigEndian
	default:
		return nil, formatErr(0, "Magic", "invalid magic 0x%08x", binary.LittleEndian.Uint32(data))
	}
	x := r.extractor(0, uint64(len(data)))
	x.off = 4
	r.hdr.Version = x.u16("Version")
	var err error
	switch r.hdr.Version {
	case 1:
		err = r.parseV1(&x)
	case 2:
		err = r.parseV2(&x)
	default:
		return nil, formatErr(4, "Version", "unsupported GSYM version %d", r.hdr.Version)
	}
	if err != nil {
		return nil, err
	}
	r.cache = newRecordCache(int(r.hdr.NumAddresses))
	r.sorted = r.tableSorted()
	r.index = r.buildIndex()
	return r, nil
}

// extractor returns an extractor over data[start:end].
func (r *Reader) extractor(start, end uint64) extractor {
	return extractor{b: r.data[start:end], le: r.le, base: start}
}

func validAddrOffSize(n uint8) bool { return n == 1 || n == 2 || n == 4 || n == 8 }

func align(off, n uint64) uint64 { return (off + n - 1) / n * n }

// slice returns data[off:off+size] or a FormatError naming field.
func (r *Reader) slice(off, size uint64, field string) ([]byte, error) {
	if off > uint64(len(r.data)) || size > uint64(len(r.data))-off {
		return nil, formatErr(off, field, "%d bytes run past the end of the file (%d bytes)", size, len(r.data))
	}
	return r.data[off : off+size], nil
}

func (r *Reader) parseV1(x *extractor) error {
	h := &r.hdr
	h.AddrOffSize = x.u8("AddrOffSize")
	uuidSize := x.u8("UUIDSize")
	h.BaseAddress = x.u64("BaseAddress")
	h.NumAddresses = x.u32("NumAddresses")
	h.StrtabOffset = uint64(x.u32("StrtabOffset"))
	h.StrtabSize = uint64(x.u32("StrtabSize"))
	uuid := x.take(maxUUIDV1, "UUID")
	if x.err != nil {
		return x.err
	}
	if !validAddrOffSize(h.AddrOffSize) {
		return formatErr(6, "AddrOffSize", "invalid address offset size %d", h.AddrOffSize)
	}
	if uuidSize > maxUUIDV1 {
		return formatErr(7, "UUIDSize", "invalid UUID size %d", uuidSize)
	}
	h.UUID = bytes.Clone(uuid[:uuidSize])
	r.strp = 4
	n := uint64(h.NumAddresses)
	off := align(headerV1Size, uint64(h.AddrOffSize))
	var err error
	if r.addrOffs, err = r.slice(off, n*uint64(h.AddrOffSize), "AddrOffsets"); err != nil {
		return err
	}
	off = align(off+n*uint64(h.AddrOffSize), 4)
	if r.infoOffs, err = r.slice(off, n*4, "AddrInfoOffsets"); err != nil {
		return err
	}
	off = align(off+n*4, 4)
	if err := r.parseFileTable(off, uint64(len(r.data))); err != nil {
		return err
	}
	if r.strtab, err = r.slice(h.StrtabOffset, h.StrtabSize, "StringTable"); err != nil {
		return err
	}
	r.infoEnd = uint64(len(r.data))
	return nil
}

func (r *Reader) parseFileTable(off, end uint64) error {
	if off > end || end-off < 4 {
		return formatErr(off, "FileTable NumFiles", "truncated")
	}
	x := r.extractor(off, end)
	r.numFiles = x.u32("FileTable NumFiles")
	var err error
	r.files, err = r.slice(off+4, uint64(r.numFiles)*2*uint64(r.strp), "FileTable")
	if err == nil && off+4+uint64(len(r.files)) > end {
		err = formatErr(off, "FileTable", "%d files overrun the section", r.numFiles)
	}
	return err
}

func (r *Reader) parseV2(x *extractor) error {
	h := &r.hdr
	h.AddrOffSize = x.u8("AddrOffSize")
	if enc := x.u8("StrTableEncoding"); x.err == nil && enc != 0 {
		return formatErr(7, "StrTableEncoding", "unsupported string table encoding %d", enc)
	}
	h.BaseAddress = x.u64("BaseAddress")
	h.NumAddresses = x.u32("NumAddresses")
	if x.err != nil {
		return x.err
	}
	if !validAddrOffSize(h.AddrOffSize) {
		return formatErr(6, "AddrOffSize", "invalid address offset size %d", h.AddrOffSize)
	}
	r.strp = 8
	var sect [gdUUID + 1][]byte
	var sectOff [gdUUID + 1]uint64
	for {
		if x.off+dirEntrySize > len(x.b) {
			return formatErr(uint64(x.off), "GlobalData", "directory has no EndOfList entry")
		}
		entryOff := uint64(x.off)
		typ := x.u32("GlobalData Type")
		off := x.u64("GlobalData FileOffset")
		size := x.u64("GlobalData FileSize")
		if typ == gdEndOfList {
			break
		}
		if size == 0 {
			return formatErr(entryOff, "GlobalData FileSize", "section type %d is empty", typ)
		}
		s, err := r.slice(off, size, fmt.Sprintf("GlobalData section type %d", typ))
		if err != nil {
			return err
		}
		if typ <= gdUUID {
			sect[typ], sectOff[typ] = s, off
		}
	}
	for typ := gdAddrOffsets; typ <= gdFunctionInfo; typ++ {
		if sect[typ] == nil && !(typ <= gdAddrInfoOffsets && h.NumAddresses == 0) {
			return formatErr(headerV2Size, "GlobalData", "required section type %d is missing", typ)
		}
	}
	n := uint64(h.NumAddresses)
	if uint64(len(sect[gdAddrOffsets])) != n*uint64(h.AddrOffSize) {
		return formatErr(sectOff[gdAddrOffsets], "AddrOffsets", "size %d is not %d addresses of %d bytes", len(sect[gdAddrOffsets]), n, h.AddrOffSize)
	}
	if uint64(len(sect[gdAddrInfoOffsets])) != n*8 {
		return formatErr(sectOff[gdAddrInfoOffsets], "AddrInfoOffsets", "size %d is not %d offsets of 8 bytes", len(sect[gdAddrInfoOffsets]), n)
	}
	r.addrOffs, r.infoOffs = sect[gdAddrOffsets], sect[gdAddrInfoOffsets]
	h.UUID = bytes.Clone(sect[gdUUID])
	r.strtab = sect[gdStringTable]
	h.StrtabOffset, h.StrtabSize = sectOff[gdStringTable], uint64(len(r.strtab))
	r.infoBase = sectOff[gdFunctionInfo]
	r.infoEnd = r.infoBase + uint64(len(sect[gdFunctionInfo]))
	ft := sectOff[gdFileTable]
	return r.parseFileTable(ft, ft+uint64(len(sect[gdFileTable])))
}

// Header returns the file's header.
func (r *Reader) Header() Header { return r.hdr }

// NumFunctions is the number of entries in the address table.
func (r *Reader) NumFunctions() int { return int(r.hdr.NumAddresses) }

// NumFiles is the number of entries in the file table (entry 0 is "no file").
func (r *Reader) NumFiles() int { return int(r.numFiles) }

// String returns the string at offset off of the string table: "" past its
// end, the rest of the table when no NUL ends it, as LLVM reads it.
func (r *Reader) String(off uint64) string {
	if off >= uint64(len(r.strtab)) {
		return ""
	}
	s := r.strtab[off:]
	if i := bytes.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	if len(s) == 0 {
		return ""
	}
	return unsafe.String(&s[0], len(s))
}

// file returns the string offsets of file table entry i.
func (r *Reader) file(i uint32) (dir, base uint64, ok bool) {
	if i >= r.numFiles {
		return 0, 0, false
	}
	p := r.files[uint64(i)*2*uint64(r.strp):]
	if r.strp == 4 {
		return uint64(r.u32(p)), uint64(r.u32(p[4:])), true
	}
	return r.u64(p), r.u64(p[8:]), true
}

// File returns the directory and base name of file table entry i.
func (r *Reader) File(i uint32) (dir, base string, ok bool) {
	d, b, ok := r.file(i)
	return r.String(d), r.String(b), ok
}

func (r *Reader) u16(p []byte) uint16 {
	if r.le {
		return binary.LittleEndian.Uint16(p)
	}
	return binary.BigEndian.Uint16(p)
}

func (r *Reader) u32(p []byte) uint32 {
	if r.le {
		return binary.LittleEndian.Uint32(p)
	}
	return binary.BigEndian.Uint32(p)
}

func (r *Reader) u64(p []byte) uint64 {
	if r.le {
		return binary.LittleEndian.Uint64(p)
	}
	return binary.BigEndian.Uint64(p)
}

// addrOffset returns entry i of the address table.
func (r *Reader) addrOffset(i int) uint64 {
	switch r.hdr.AddrOffSize {
	case 1:
		return uint64(r.addrOffs[i])
	case 2:
		return uint64(r.u16(r.addrOffs[2*i:]))
	case 4:
		return uint64(r.u32(r.addrOffs[4*i:]))
	default:
		return r.u64(r.addrOffs[8*i:])
	}
}

// addrIndex narrows the address-table search to a few entries: the
// offsets from the first function's on are cut into buckets of 1<<shift
// bytes, and first[b] is the first entry at or above bucket b's start. A
// binary search over a large table takes a dozen dependent loads spread
// over the table, most of them cache misses when lookups spread over a
// binary; through the index a lookup reads one bucket and the one or two
// cache lines of table entries the bucket spans.
type addrIndex struct {
	first []uint32 // len = buckets + 1; the last is NumAddresses
	min   uint64   // the first entry's offset
	shift uint
}

// entriesPerBucket sizes the index at one byte per function: buckets of
// about four entries, which a search covers in one cache line.
const entriesPerBucket = 4

// tableSorted reports whether the address table is in ascending order.
func (r *Reader) tableSorted() bool {
	for i := 1; i < int(r.hdr.NumAddresses); i++ {
		if r.addrOffset(i) < r.addrOffset(i-1) {
			return false
		}
	}
	return true
}

// buildIndex returns the index of the address table, or none when the
// table is too small to need one or is not sorted (a corrupt file, which
// the plain binary search handles as LLVM's does).
func (r *Reader) buildIndex() addrIndex {
	n := int(r.hdr.NumAddresses)
	if n < 64 || n >= 1<<32-1 || !r.sorted {
		return addrIndex{}
	}
	x := addrIndex{min: r.addrOffset(0)}
	span := r.addrOffset(n-1) - x.min
	for span>>x.shift >= uint64(n/entriesPerBucket) {
		x.shift++
	}
	buckets := int(span>>x.shift) + 1
	x.first = make([]uint32, buckets+1)
	j := 0
	for b := range buckets {
		t := x.min + uint64(b)<<x.shift
		for j < n && r.addrOffset(j) < t {
			j++
		}
		x.first[b] = uint32(j)
	}
	x.first[buckets] = uint32(n)
	return x
}

// lowerBound returns the index of the first address-table entry >= off.
// The common layouts get their own loops so each search step is one load
// and one compare.
func (r *Reader) lowerBound(off uint64) int {
	lo, hi := 0, int(r.hdr.NumAddresses)
	if x := &r.index; x.first != nil {
		if off <= x.min {
			return 0
		}
		b := (off - x.min) >> x.shift
		if b >= uint64(len(x.first)-1) {
			return hi
		}
		lo, hi = int(x.first[b]), int(x.first[b+1])
	}
	if r.le {
		switch r.hdr.AddrOffSize {
		case 2:
			return searchTable(r.addrOffs, lo, hi, off, 2, func(b []byte) uint64 { return uint64(binary.LittleEndian.Uint16(b)) })
		case 4:
			return searchTable(r.addrOffs, lo, hi, off, 4, func(b []byte) uint64 { return uint64(binary.LittleEndian.Uint32(b)) })
		case 8:
			return searchTable(r.addrOffs, lo, hi, off, 8, binary.LittleEndian.Uint64)
		}
	}
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if r.addrOffset(m) < off {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// searchTable is a lower-bound search over entries [lo, hi) of width w;
// load is inlined into each instantiation's loop.
func searchTable(t []byte, lo, hi int, off uint64, w int, load func([]byte) uint64) int {
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if load(t[w*m:]) < off {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// Address returns the start address of function i.
func (r *Reader) Address(i int) uint64 { return r.hdr.BaseAddress + r.addrOffset(i) }

// infoOffset returns the absolute file offset of function i's record.
func (r *Reader) infoOffset(i int) uint64 {
	if r.strp == 4 {
		return uint64(r.u32(r.infoOffs[4*i:]))
	}
	return r.infoBase + r.u64(r.infoOffs[8*i:])
}

// functionData returns an extractor over function i's record (up to the
// end of the FunctionInfo area) and the function's start address.
func (r *Reader) functionData(i int) (extractor, uint64, error) {
	off := r.infoOffset(i)
	if off >= r.infoEnd || off < r.infoBase {
		return extractor{}, 0, formatErr(off, "AddrInfoOffsets", "invalid address info offset 0x%x for function %d", off, i)
	}
	return r.extractor(off, r.infoEnd), r.Address(i), nil
}

// findIndex returns the first of the address-table entries whose start is
// the greatest at or below addr, using LLVM's rules: equal starts are
// stepped back over so that every candidate is tried.
func (r *Reader) findIndex(addr uint64) (int, bool) {
	n := int(r.hdr.NumAddresses)
	if addr < r.hdr.BaseAddress || n == 0 {
		return 0, false
	}
	off := addr - r.hdr.BaseAddress
	i := r.lowerBound(off)
	if i == 0 && off < r.addrOffset(0) {
		return 0, false
	}
	if i == n || off < r.addrOffset(i) {
		i--
	}
	for i > 0 && r.addrOffset(i-1) == r.addrOffset(i) {
		i--
	}
	return i, true
}
