package gsym

import (
	"errors"
	"slices"
)

// Line-table opcodes. Bytes from firstSpecial up advance both the address
// and the line, by amounts packed into the opcode.
const (
	lteEndSequence = 0x00
	lteSetFile     = 0x01
	lteAdvancePC   = 0x02
	lteAdvanceLine = 0x03
	firstSpecial   = 0x04
)

// lineIter walks the rows of an encoded line table without allocating.
type lineIter struct {
	x   extractor
	min int64
	// rng is the number of line deltas special opcodes encode, capped at
	// 256: an opcode's operand is below 252, so a larger range divides
	// it the same. recip is 2^16/rng rounded up: for operands and
	// ranges up to 256, (a*recip)>>16 is a/rng exactly, a multiply
	// instead of a division.
	rng, recip uint32
	row        LineEntry
}

// special applies special opcode op (>= firstSpecial) to row.
func (it *lineIter) special(row *LineEntry, op byte) {
	a := uint32(op - firstSpecial)
	q := a * it.recip >> 16
	row.Line += uint32(it.min + int64(a-q*it.rng))
	row.Addr += uint64(q)
}

func newLineIter(x extractor, start uint64) lineIter {
	it := lineIter{x: x}
	it.min = it.x.sleb("LineTable MinDelta")
	maxDelta := it.x.sleb("LineTable MaxDelta")
	rng := maxDelta - it.min + 1
	it.rng = uint32(min(max(rng, 1), 256))
	it.recip = (1<<16 + it.rng - 1) / it.rng
	first := it.x.uleb("LineTable FirstLine")
	if it.x.err == nil && rng <= 0 {
		it.x.fail("LineTable MaxDelta", "MaxDelta below MinDelta")
	}
	it.row = LineEntry{Addr: start, File: 1, Line: uint32(first)}
	return it
}

// next decodes up to the next row and reports whether there is one; at the
// end of the table or on an error (it.x.err) it returns false.
func (it *lineIter) next() bool {
	x := &it.x
	for x.err == nil {
		if x.off >= len(x.b) {
			x.fail("LineTable opcode", "EOF found before EndSequence")
			return false
		}
		op := x.b[x.off]
		x.off++
		switch op {
		case lteEndSequence:
			return false
		case lteSetFile:
			it.row.File = uint32(x.uleb("LineTable SetFile"))
		case lteAdvancePC:
			it.row.Addr += x.uleb("LineTable AdvancePC")
			return x.err == nil
		case lteAdvanceLine:
			it.row.Line += uint32(x.sleb("LineTable AdvanceLine"))
		default:
			it.special(&it.row, op)
			return true
		}
	}
	return false
}

// decodeLines decodes a whole line table.
func decodeLines(x extractor, start uint64) ([]LineEntry, error) {
	it := newLineIter(x, start)
	// Most rows take one or two bytes, so this rarely grows much.
	rows := make([]LineEntry, 0, (len(it.x.b)-it.x.off)/2+4)
	for it.next() {
		if len(rows) >= len(x.b) { // every row costs at least one byte
			break
		}
		rows = append(rows, it.row)
	}
	if it.x.err != nil {
		return nil, it.x.err
	}
	return rows, nil
}

var errEmptyLineTable = errors.New("gsym: attempted to encode invalid LineTable object")

// lineDeltaWindow picks the range of line deltas that special opcodes
// encode, exactly as LLVM does, so our tables are byte-identical.
func lineDeltaWindow(rows []LineEntry) (minDelta, maxDelta int64) {
	if len(rows) <= 1 {
		return 0, 0
	}
	counts := map[int64]int{}
	minDelta, maxDelta = int64(1)<<62, -int64(1)<<62
	for i := 1; i < len(rows); i++ {
		d := int64(rows[i].Line) - int64(rows[i-1].Line)
		counts[d]++
		minDelta, maxDelta = min(minDelta, d), max(maxDelta, d)
	}
	const maxSpan = 14 // 255 - firstSpecial leaves room for 15 line deltas at address delta 0..15
	if maxDelta-minDelta > maxSpan {
		deltas := make([]int64, 0, len(counts))
		for d := range counts {
			deltas = append(deltas, d)
		}
		slices.Sort(deltas)
		best := -1
		for i, lo := range deltas {
			sum, hi := 0, lo
			for _, d := range deltas[i:] {
				if d-lo > maxSpan {
					break
				}
				sum += counts[d]
				hi = d
			}
			if sum > best {
				best, minDelta, maxDelta = sum, lo, hi
			}
		}
	}
	if minDelta == maxDelta && minDelta > 0 && minDelta < maxSpan {
		minDelta = 0
	}
	return minDelta, maxDelta
}

// appendLines encodes a line table for a function starting at start.
func appendLines(b []byte, rows []LineEntry, start uint64) ([]byte, error) {
	if len(rows) == 0 {
		return b, errEmptyLineTable
	}
	minDelta, maxDelta := lineDeltaWindow(rows)
	rng := maxDelta - minDelta + 1
	b = appendSLEB(b, minDelta)
	b = appendSLEB(b, maxDelta)
	b = appendULEB(b, uint64(rows[0].Line))
	prev := LineEntry{Addr: start, File: 1, Line: rows[0].Line}
	for _, row := range rows {
		if row.Addr < prev.Addr {
			return b, formatErr(0, "LineTable", "row address 0x%x below the previous 0x%x", row.Addr, prev.Addr)
		}
		addrDelta := row.Addr - prev.Addr
		lineDelta := int64(row.Line) - int64(prev.Line)
		if row.File != prev.File {
			b = append(b, lteSetFile)
			b = appendULEB(b, uint64(row.File))
		}
		if lineDelta >= minDelta && lineDelta <= maxDelta && addrDelta <= 255 {
			if op := uint64(lineDelta-minDelta) + addrDelta*uint64(rng) + firstSpecial; op <= 255 {
				b = append(b, byte(op))
				prev = row
				continue
			}
		}
		if lineDelta != 0 {
			b = append(b, lteAdvanceLine)
			b = appendSLEB(b, lineDelta)
		}
		b = append(b, lteAdvancePC)
		b = appendULEB(b, addrDelta)
		prev = row
	}
	return append(b, lteEndSequence), nil
}
