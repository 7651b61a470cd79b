package convert

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
)

// lineRow is one row of a DWARF line-number matrix, in 16 bytes: big
// units have hundreds of thousands.
type lineRow struct {
	addr uint64
	file uint32 // the file number, and endSeqBit
	line uint32
}

// endSeqBit marks the row that ends a sequence. File numbers above
// maxFileNum (never valid: no file table is that long) become maxFileNum.
const (
	endSeqBit  = 1 << 31
	maxFileNum = endSeqBit - 1
)

func (r lineRow) fileNum() uint32 { return r.file &^ endSeqBit }
func (r lineRow) endSeq() bool    { return r.file&endSeqBit != 0 }

// lineSeq is a contiguous run of rows [first, last) whose last row ends the
// sequence; low and high bound its addresses.
type lineSeq struct {
	low, high   uint64
	first, last int
}

// lineFile is a file-table entry of a line program header.
type lineFile struct {
	name string
	dir  uint64
}

// lineTable is a parsed DWARF line program, kept as LLVM's DWARFDebugLine
// keeps it, so that a function's rows are chosen by the same rules.
type lineTable struct {
	version int
	dirs    []string
	files   []lineFile
	rows    []lineRow
	seqs    []lineSeq // sorted by high address
}

// cursor reads a DWARF section, bound-checked: the first failed read
// records an error naming the section and the offset, and every read after
// it returns zero, so parsers check once, at the end of a record.
type cursor struct {
	name  string // section, for errors
	b     []byte
	off   int
	order binary.ByteOrder
	err   error
}

func (b *cursor) fail(what string) {
	if b.err == nil {
		b.err = fmt.Errorf("%s: %s at offset %#x", b.name, what, b.off)
	}
	b.off = len(b.b)
}

func (b *cursor) bytes(n int) []byte {
	if b.err != nil || n < 0 || len(b.b)-b.off < n {
		b.fail("truncated")
		return nil
	}
	p := b.b[b.off : b.off+n]
	b.off += n
	return p
}

func (b *cursor) skip(n uint64) {
	if b.err != nil || uint64(len(b.b)-b.off) < n {
		b.fail("truncated")
		return
	}
	b.off += int(n)
}

func (b *cursor) u8() uint8 {
	if b.off < len(b.b) {
		b.off++
		return b.b[b.off-1]
	}
	b.fail("truncated")
	return 0
}
func (b *cursor) u16() uint16 {
	if p := b.bytes(2); p != nil {
		return b.order.Uint16(p)
	}
	return 0
}
func (b *cursor) u32() uint32 {
	if p := b.bytes(4); p != nil {
		return b.order.Uint32(p)
	}
	return 0
}
func (b *cursor) u64() uint64 {
	if p := b.bytes(8); p != nil {
		return b.order.Uint64(p)
	}
	return 0
}

// uint reads an n-byte unsigned integer, n from 1 to 8.
func (b *cursor) uint(n int) uint64 {
	switch n {
	case 1:
		return uint64(b.u8())
	case 2:
		return uint64(b.u16())
	case 4:
		return uint64(b.u32())
	case 8:
		return b.u64()
	}
	p := b.bytes(n)
	if p == nil || n > 8 {
		b.fail(fmt.Sprintf("unsupported size %d", n))
		return 0
	}
	var v uint64
	for i := range p {
		if b.order == binary.BigEndian {
			v = v<<8 | uint64(p[i])
		} else {
			v |= uint64(p[i]) << (8 * i)
		}
	}
	return v
}

func (b *cursor) uleb() uint64 {
	v, n := uleb(b.b[b.off:])
	if n == 0 {
		b.fail("truncated LEB128")
		return 0
	}
	b.off += n
	return v
}

func (b *cursor) sleb() int64 {
	v, n := sleb(b.b[b.off:])
	if n == 0 {
		b.fail("truncated LEB128")
		return 0
	}
	b.off += n
	return v
}

// uleb decodes an unsigned LEB128 at the start of p and returns its length,
// 0 when p ends first (then the caller's loop ends: it moves to len(p)).
func uleb(p []byte) (uint64, int) {
	var v uint64
	var shift uint
	for i, c := range p {
		if shift < 64 {
			v |= uint64(c&0x7f) << shift
		}
		shift += 7
		if c < 0x80 {
			return v, i + 1
		}
	}
	return 0, 0
}

// sleb is uleb for signed LEB128.
func sleb(p []byte) (int64, int) {
	var v int64
	var shift uint
	for i, c := range p {
		if shift < 64 {
			v |= int64(c&0x7f) << shift
		}
		shift += 7
		if c < 0x80 {
			if shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			return v, i + 1
		}
	}
	return 0, 0
}

func (b *cursor) skipLEB() {
	for i := b.off; i < len(b.b); i++ {
		if b.b[i] < 0x80 {
			b.off = i + 1
			return
		}
	}
	b.fail("truncated LEB128")
}

func (b *cursor) cstr() string { return string(b.cstrBytes()) }

func strAt(sect []byte, off uint64) (string, bool) {
	if off >= uint64(len(sect)) {
		return "", false
	}
	s := sect[off:]
	if i := bytes.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	return string(s), true
}

// DWARF 5 line-table content types used in file tables.
const (
	lnctPath           = 1
	lnctDirectoryIndex = 2
)

// lineFormValue reads one attribute value of a v5 entry format; s is set
// for string forms.
func (b *cursor) lineFormValue(form uint64, dwarf64 bool, secs *dwarfData) (v uint64, s string, isStr bool) {
	offSize := 4
	if dwarf64 {
		offSize = 8
	}
	switch form {
	case formString:
		return 0, b.cstr(), true
	case formStrp, formLineStrp:
		off := b.uint(offSize)
		sect := secs.str
		if form == formLineStrp {
			sect = secs.lineStr
		}
		str, ok := strAt(sect, off)
		if !ok && b.err == nil {
			b.fail("string offset out of range")
		}
		return 0, str, true
	case formData1:
		return uint64(b.u8()), "", false
	case formData2:
		return uint64(b.u16()), "", false
	case formData4:
		return uint64(b.u32()), "", false
	case formData8:
		return b.u64(), "", false
	case formData16:
		b.bytes(16)
		return 0, "", false
	case formUdata:
		return b.uleb(), "", false
	case formSdata:
		return uint64(b.sleb()), "", false
	case formBlock:
		b.bytes(int(b.uleb()))
		return 0, "", false
	case formBlock1:
		b.bytes(int(b.u8()))
		return 0, "", false
	case formBlock2:
		b.bytes(int(b.u16()))
		return 0, "", false
	case formBlock4:
		b.bytes(int(b.u32()))
		return 0, "", false
	case formSecOffset:
		return b.uint(offSize), "", false
	case formStrx, formStrx1, formStrx2, formStrx3, formStrx4:
		b.fail("strx forms need .debug_str_offsets, unsupported in line tables")
		return 0, "", false
	}
	b.fail(fmt.Sprintf("unknown form %#x", form))
	return 0, "", false
}

// parseLineTable parses the line program at off, appending its rows to
// rows[:0] (a buffer from an earlier table, no longer used). Addresses in
// DW_LNE_set_address are as wide as the operand.
func parseLineTable(secs *dwarfData, off uint64, rows []lineRow) (*lineTable, error) {
	if off >= uint64(len(secs.line)) {
		return nil, fmt.Errorf("debug_line offset %#x out of range", off)
	}
	b := &cursor{name: "debug_line", b: secs.line, off: int(off), order: secs.order}
	unitLen := uint64(b.u32())
	dwarf64 := false
	if unitLen == 0xffffffff {
		dwarf64 = true
		unitLen = b.u64()
	}
	if b.err != nil || unitLen > uint64(len(b.b)-b.off) {
		return nil, fmt.Errorf("debug_line unit at %#x: bad length", off)
	}
	end := b.off + int(unitLen)
	b.b = b.b[:end]
	t := &lineTable{version: int(b.u16())}
	if t.version < 2 || t.version > 5 {
		return nil, fmt.Errorf("debug_line unit at %#x: unsupported version %d", off, t.version)
	}
	if t.version >= 5 {
		b.u8() // address size
		b.u8() // segment selector size
	}
	var hdrLen uint64
	if dwarf64 {
		hdrLen = b.u64()
	} else {
		hdrLen = uint64(b.u32())
	}
	progStart := b.off + int(hdrLen)
	if hdrLen > uint64(end-b.off) {
		return nil, fmt.Errorf("debug_line unit at %#x: header length past the unit", off)
	}
	minInst := uint64(b.u8())
	if t.version >= 4 {
		b.u8() // maximum operations per instruction
	}
	defaultIsStmt := b.u8() != 0
	_ = defaultIsStmt
	lineBase := int64(int8(b.u8()))
	lineRange := uint64(b.u8())
	opBase := b.u8()
	stdLens := b.bytes(int(opBase) - 1)
	if opBase == 0 {
		stdLens = nil
	}
	if t.version >= 5 {
		t.dirs = b.v5Entries(secs, dwarf64, nil)
		var files []lineFile
		b.v5Entries(secs, dwarf64, &files)
		t.files = files
	} else {
		for b.err == nil {
			s := b.cstr()
			if s == "" {
				break
			}
			t.dirs = append(t.dirs, s)
		}
		for b.err == nil {
			s := b.cstr()
			if s == "" {
				break
			}
			dir := b.uleb()
			b.uleb() // mtime
			b.uleb() // length
			t.files = append(t.files, lineFile{name: s, dir: dir})
		}
	}
	if b.err != nil {
		return nil, b.err
	}
	b.off = progStart
	// A row costs 3.7 bytes of program in gcc and Go binaries: size the
	// matrix once.
	t.rows = rows[:0]
	if n := (end-progStart)/3 + 16; cap(t.rows) < n {
		t.rows = make([]lineRow, 0, n)
	}
	t.run(b, minInst, lineBase, lineRange, opBase, stdLens)
	if b.err != nil && len(t.rows) == 0 {
		return nil, b.err
	}
	// Sort sequences by end address, stably, as LLVM does before lookups.
	sortSeqs(t.seqs)
	return t, nil
}

// v5Entries reads a DWARF 5 directory or file table; with files nil it
// returns directory paths, otherwise it fills *files.
func (b *cursor) v5Entries(secs *dwarfData, dwarf64 bool, files *[]lineFile) []string {
	nfmt := int(b.u8())
	type pair struct{ typ, form uint64 }
	fmts := make([]pair, 0, nfmt)
	for i := 0; i < nfmt && b.err == nil; i++ {
		fmts = append(fmts, pair{b.uleb(), b.uleb()})
	}
	n := b.uleb()
	// Every entry takes at least a byte per format: a count beyond what
	// is left cannot be read (and without formats, would loop for nothing).
	if n > 0 && (nfmt == 0 || n > uint64(len(b.b)-b.off)) {
		b.fail(fmt.Sprintf("%d entries of %d formats", n, nfmt))
		return nil
	}
	var dirs []string
	for i := uint64(0); i < n && b.err == nil; i++ {
		var f lineFile
		for _, p := range fmts {
			v, s, isStr := b.lineFormValue(p.form, dwarf64, secs)
			switch p.typ {
			case lnctPath:
				if isStr {
					f.name = s
				}
			case lnctDirectoryIndex:
				f.dir = v
			}
		}
		if files == nil {
			dirs = append(dirs, f.name)
		} else {
			*files = append(*files, f)
		}
	}
	return dirs
}

// run executes the line-number program, appending rows and sequences.
// Most of a program is special opcodes and small operands: the loop keeps
// its state in locals and decodes those inline.
func (t *lineTable) run(b *cursor, minInst uint64, lineBase int64, lineRange uint64, opBase uint8, stdLens []byte) {
	// What each special opcode adds to the address and the line.
	var special [256]struct {
		addr uint64
		line uint32
	}
	var constAddPC uint64
	if lineRange != 0 {
		for op := int(opBase); op < 256; op++ {
			adj := uint64(op - int(opBase))
			special[op].addr = adj / lineRange * minInst
			special[op].line = uint32(lineBase + int64(adj%lineRange))
		}
		constAddPC = uint64(255-opBase) / lineRange * minInst
	}
	const resetFile, resetLine = 1, 1
	addr, file, line := uint64(0), uint32(resetFile), uint32(resetLine)
	seqFirst, seqLow, inSeq := 0, uint64(0), false
	rows := t.rows
	data, off := b.b, b.off
	for off < len(data) {
		op := data[off]
		off++
		endSeq := false
		if op >= opBase {
			addr += special[op].addr
			line += special[op].line
		} else {
			switch op {
			case 0: // extended
				b.off = off
				n := b.uleb()
				if b.err != nil || n == 0 || n > uint64(len(data)-b.off) {
					b.fail("bad extended opcode length")
					t.rows = rows
					return
				}
				next := b.off + int(n)
				switch b.u8() {
				case 1: // DW_LNE_end_sequence
					endSeq = true
				case 2: // DW_LNE_set_address
					addr = b.uint(int(n) - 1)
				}
				if b.err != nil {
					t.rows = rows
					return
				}
				off = next
				if !endSeq {
					continue
				}
				goto emit
			case 1: // DW_LNS_copy
				goto emit
			case 2: // DW_LNS_advance_pc
				v, k := uleb(data[off:])
				addr += v * minInst
				off += k
				if k == 0 {
					break
				}
				continue
			case 3: // DW_LNS_advance_line
				v, k := sleb(data[off:])
				line += uint32(v)
				off += k
				if k == 0 {
					break
				}
				continue
			case 4: // DW_LNS_set_file
				v, k := uleb(data[off:])
				file = uint32(min(v, maxFileNum))
				off += k
				if k == 0 {
					break
				}
				continue
			case 5, 12: // DW_LNS_set_column, DW_LNS_set_isa
				_, k := uleb(data[off:])
				off += k
				if k == 0 {
					break
				}
				continue
			case 6, 7, 10, 11: // negate_stmt, basic_block, prologue_end, epilogue_begin
				continue
			case 8: // DW_LNS_const_add_pc
				addr += constAddPC
				continue
			case 9: // DW_LNS_fixed_advance_pc
				if len(data)-off < 2 {
					break
				}
				addr += uint64(b.order.Uint16(data[off:]))
				off += 2
				continue
			default: // unknown standard opcode: skip its ULEB operands
				k := 1
				for i := 0; int(op)-1 < len(stdLens) && i < int(stdLens[op-1]) && k > 0; i++ {
					_, k = uleb(data[off:])
					off += k
				}
				if k == 0 {
					break
				}
				continue
			}
			// An operand runs past the end of the program.
			b.off = off
			b.fail("truncated operand")
			t.rows = rows
			return
		}
	emit:
		if !inSeq {
			inSeq, seqFirst, seqLow = true, len(rows), addr
		}
		row := lineRow{addr: addr, file: file, line: line}
		if endSeq {
			row.file |= endSeqBit
		}
		rows = append(rows, row)
		if endSeq {
			if seqLow < addr {
				t.seqs = append(t.seqs, lineSeq{low: seqLow, high: addr, first: seqFirst, last: len(rows)})
			}
			inSeq = false
			addr, file, line = 0, resetFile, resetLine
		}
	}
	t.rows = rows
	b.off = off
}

// sortSeqs orders sequences by end address, stably, as LLVM does before
// any lookup.
func sortSeqs(s []lineSeq) {
	slices.SortStableFunc(s, func(a, b lineSeq) int { return cmp.Compare(a.high, b.high) })
}

// rowsForRange returns the indexes of the rows LLVM's
// LineTable::lookupAddressRange returns for [start, end): rows of every
// sequence overlapping the range, from the row covering start.
func (t *lineTable) rowsForRange(start, end uint64, dst []int) []int {
	dst = dst[:0]
	// upper_bound by high address: the first sequence ending after start.
	i, _ := slices.BinarySearchFunc(t.seqs, start, func(s lineSeq, a uint64) int {
		if s.high <= a {
			return -1
		}
		return 1
	})
	if i == len(t.seqs) || !t.seqs[i].contains(start) {
		return dst
	}
	for j := i; j < len(t.seqs) && t.seqs[j].low < end; j++ {
		s := t.seqs[j]
		first := s.first
		if j == i {
			first = t.rowInSeq(s, start)
		}
		last := s.last - 1
		if s.contains(end - 1) {
			last = t.rowInSeq(s, end-1)
		}
		for k := first; k <= last; k++ {
			dst = append(dst, k)
		}
	}
	return dst
}

func (s lineSeq) contains(a uint64) bool { return s.low <= a && a < s.high }

// rowInSeq is LLVM's findRowInSeq: upper_bound over the sequence's rows
// (without its first and end rows) minus one, by the same binary search so
// that unsorted rows give the same answer.
func (t *lineTable) rowInSeq(s lineSeq, a uint64) int {
	first, n := s.first+1, s.last-1-(s.first+1)
	for n > 0 {
		half := n >> 1
		mid := first + half
		if a < t.rows[mid].addr {
			n = half
		} else {
			first = mid + 1
			n -= half + 1
		}
	}
	return first - 1
}

// filePath returns the absolute path of file index i as LLVM's
// getFileNameByIndex builds it, and false for an invalid index.
func (t *lineTable) filePath(i uint64, compDir string) (string, bool) {
	var f lineFile
	if t.version >= 5 {
		if i >= uint64(len(t.files)) {
			return "", false
		}
		f = t.files[i]
	} else {
		if i == 0 || i > uint64(len(t.files)) {
			return "", false
		}
		f = t.files[i-1]
	}
	if isAbsPath(f.name) {
		return f.name, true
	}
	var dir string
	if t.version >= 5 {
		if f.dir < uint64(len(t.dirs)) {
			dir = t.dirs[f.dir]
		}
	} else if f.dir > 0 && f.dir <= uint64(len(t.dirs)) {
		dir = t.dirs[f.dir-1]
	}
	var p string
	if (t.version < 5 || f.dir != 0) && compDir != "" && !isAbsPath(dir) {
		p = appendPath(p, compDir)
	}
	p = appendPath(p, dir)
	return appendPath(p, f.name), true
}

// isAbsPath is LLVM's isPathAbsoluteOnWindowsOrPosix.
func isAbsPath(p string) bool {
	if strings.HasPrefix(p, "/") {
		return true
	}
	if len(p) >= 3 && p[1] == ':' && (p[2] == '/' || p[2] == '\\') {
		c := p[0] | 0x20
		return c >= 'a' && c <= 'z'
	}
	return strings.HasPrefix(p, `\\`) && len(p) > 2 && p[2] != '\\' && p[2] != '/'
}

// appendPath is llvm::sys::path::append for POSIX paths: one separator
// between components, none added after an empty path.
func appendPath(p, comp string) string {
	if p != "" && strings.HasSuffix(p, "/") {
		return p + strings.TrimLeft(comp, "/")
	}
	if !strings.HasPrefix(comp, "/") && p != "" {
		p += "/"
	}
	return p + comp
}
