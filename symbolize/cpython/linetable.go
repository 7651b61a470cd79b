package cpython

// lineReader returns the reader of version v's line table: each gives the
// source line of the code unit (2 bytes) at index lasti in a code object
// whose table is table and whose first line is firstLine, false when the
// table gives none or does not parse. A negative lasti (a frame that has
// not run its first instruction) is on the first line, as CPython says.
func lineReader(v Version) func(table []byte, firstLine, lasti int) (int, bool) {
	switch {
	case v.Minor <= 9:
		return lnotabLineAt
	case v.Minor == 10:
		return linetable310LineAt
	}
	return lineAt
}

// lnotabLineAt reads 3.9's co_lnotab: pairs of bytes, the first the
// bytecode offset's increment (unsigned), the second the line's (signed);
// a line increment applies from its offset on.
func lnotabLineAt(table []byte, firstLine, lasti int) (int, bool) {
	if lasti < 0 {
		return firstLine, true
	}
	line, addr, at := firstLine, 0, 2*lasti
	for i := 0; i+1 < len(table); i += 2 {
		if addr += int(table[i]); addr > at {
			break
		}
		line += int(int8(table[i+1]))
	}
	return line, true
}

// noLine310 is 3.10's line delta for bytecode with no line.
const noLine310 = -128

// linetable310LineAt reads 3.10's co_linetable: pairs of bytes, the first
// the number of bytecode bytes a range covers (unsigned), the second the
// line's increment from the previous range's (signed), noLine310 for a
// range without a line, which leaves the line as it was for the next.
func linetable310LineAt(table []byte, firstLine, lasti int) (int, bool) {
	if lasti < 0 {
		return firstLine, true
	}
	line, end, at := firstLine, 0, 2*lasti
	for i := 0; i+1 < len(table); i += 2 {
		end += int(table[i])
		delta := int(int8(table[i+1]))
		if delta != noLine310 {
			line += delta
		}
		if at < end {
			return line, delta != noLine310
		}
	}
	return 0, false
}

// The location table of 3.11 and later (co_linetable; the format is
// described in CPython's Objects/locations.md): a sequence of entries,
// each starting with a byte whose top bit is set, whose bits 3-6 are a
// code and whose bits 0-2 are the number of code units covered, less one.
// The code says how the line changes and what follows:
//
//	15      no location: the line is unknown
//	14      long form: line delta (svarint), end line delta, column + 1,
//	        end column + 1 (varints)
//	13      no column: line delta (svarint)
//	10..12  one-line form: line delta code-10, start and end column bytes
//	0..9    short form: same line, one column byte
//
// Varints are little-endian groups of 6 bits, bit 6 set on all but the
// last byte; an svarint is a varint holding the magnitude shifted left
// once and the sign in bit 0.
const (
	locNone    = 15
	locLong    = 14
	locNoCol   = 13
	locOneLine = 10
)

// lineAt reads the location table of 3.11 and later, as lineReader says.
func lineAt(table []byte, firstLine, lasti int) (int, bool) {
	if lasti < 0 {
		return firstLine, true
	}
	line, addr := firstLine, 0
	for i := 0; i < len(table); {
		b := table[i]
		if b&0x80 == 0 {
			return 0, false
		}
		i++
		code, n := int(b>>3&15), int(b&7)+1
		delta := 0
		var ok bool
		switch {
		case code == locNone:
		case code == locLong:
			if delta, i, ok = svarint(table, i); !ok {
				return 0, false
			}
			for k := 0; k < 3 && ok; k++ { // end line, column, end column
				_, i, ok = varint(table, i)
			}
			if !ok {
				return 0, false
			}
		case code == locNoCol:
			if delta, i, ok = svarint(table, i); !ok {
				return 0, false
			}
		case code >= locOneLine:
			delta = code - locOneLine
			i += 2
		default:
			i++
		}
		line += delta
		if lasti < addr+n {
			return line, code != locNone && i <= len(table)
		}
		addr += n
	}
	return 0, false
}

// varint reads a varint at table[i:], returning it and the index after it.
func varint(table []byte, i int) (int, int, bool) {
	v, shift := 0, 0
	for ; i < len(table) && shift < 30; shift += 6 {
		b := table[i]
		i++
		v |= int(b&63) << shift
		if b&64 == 0 {
			return v, i, true
		}
	}
	return 0, i, false
}

func svarint(table []byte, i int) (int, int, bool) {
	u, i, ok := varint(table, i)
	if u&1 != 0 {
		return -(u >> 1), i, ok
	}
	return u >> 1, i, ok
}
