package gsym

import "encoding/binary"

// extractor reads fixed-width integers in a file's byte order and LEB128
// numbers from a window of a GSYM file. The first failed read records a
// FormatError and every later read returns zero, so decoders check err once
// per record instead of after every field, and never read out of bounds.
type extractor struct {
	b    []byte
	le   bool   // little-endian; a flag, not a binary.ByteOrder, so reads inline
	base uint64 // file offset of b[0], for error messages
	off  int
	err  *FormatError
}

func (x *extractor) fail(field, msg string) {
	if x.err == nil {
		x.err = formatErr(x.base+uint64(x.off), field, "%s", msg)
	}
	x.off = len(x.b)
}

func (x *extractor) take(n int, field string) []byte {
	if x.err != nil {
		return nil
	}
	if n < 0 || len(x.b)-x.off < n {
		x.fail(field, "truncated")
		return nil
	}
	p := x.b[x.off : x.off+n]
	x.off += n
	return p
}

func (x *extractor) u8(field string) uint8 {
	if p := x.take(1, field); p != nil {
		return p[0]
	}
	return 0
}

func (x *extractor) u16(field string) uint16 {
	if p := x.take(2, field); p != nil {
		if x.le {
			return binary.LittleEndian.Uint16(p)
		}
		return binary.BigEndian.Uint16(p)
	}
	return 0
}

func (x *extractor) u32(field string) uint32 {
	if p := x.take(4, field); p != nil {
		if x.le {
			return binary.LittleEndian.Uint32(p)
		}
		return binary.BigEndian.Uint32(p)
	}
	return 0
}

func (x *extractor) u64(field string) uint64 {
	if p := x.take(8, field); p != nil {
		if x.le {
			return binary.LittleEndian.Uint64(p)
		}
		return binary.BigEndian.Uint64(p)
	}
	return 0
}

// uint reads an unsigned integer of width 1, 2, 4 or 8 bytes.
func (x *extractor) uint(width int, field string) uint64 {
	switch width {
	case 1:
		return uint64(x.u8(field))
	case 2:
		return uint64(x.u16(field))
	case 4:
		return uint64(x.u32(field))
	default:
		return x.u64(field)
	}
}

// uleb reads an unsigned LEB128 number. Numbers of one and two bytes,
// nearly all of those in line tables and inline trees, take a fast path
// (a failed extractor is at its end, so it never takes it).
func (x *extractor) uleb(field string) uint64 {
	if i := x.off; i+1 < len(x.b) {
		c, d := x.b[i], x.b[i+1]
		if c < 0x80 {
			x.off = i + 1
			return uint64(c)
		}
		if d < 0x80 {
			x.off = i + 2
			return uint64(c&0x7f) | uint64(d)<<7
		}
	}
	if x.err != nil {
		return 0
	}
	v, n := uleb128(x.b[x.off:])
	if n <= 0 {
		x.fail(field, "bad ULEB128")
		return 0
	}
	x.off += n
	return v
}

// sleb reads a signed LEB128 number, those of one and two bytes on a
// fast path.
func (x *extractor) sleb(field string) int64 {
	if i := x.off; i+1 < len(x.b) {
		c, d := x.b[i], x.b[i+1]
		if c < 0x80 {
			x.off = i + 1
			return int64(c) << 57 >> 57
		}
		if d < 0x80 {
			x.off = i + 2
			return int64(uint64(c&0x7f)|uint64(d)<<7) << 50 >> 50
		}
	}
	if x.err != nil {
		return 0
	}
	v, n := sleb128(x.b[x.off:])
	if n <= 0 {
		x.fail(field, "bad SLEB128")
		return 0
	}
	x.off += n
	return v
}

// uleb128 decodes an unsigned LEB128 number; n is the bytes used, 0 when b
// ends first or the value does not fit in 64 bits.
func uleb128(b []byte) (v uint64, n int) {
	var shift uint
	for i, c := range b {
		if shift >= 64 || (shift == 63 && c&0x7e != 0) {
			return 0, 0
		}
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return v, i + 1
		}
		shift += 7
	}
	return 0, 0
}

func sleb128(b []byte) (v int64, n int) {
	var shift uint
	for i, c := range b {
		if shift >= 64 {
			return 0, 0
		}
		v |= int64(c&0x7f) << shift
		shift += 7
		if c&0x80 == 0 {
			if shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			return v, i + 1
		}
	}
	return 0, 0
}

func appendULEB(b []byte, v uint64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			b = append(b, c|0x80)
			continue
		}
		return append(b, c)
	}
}

func appendSLEB(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}
