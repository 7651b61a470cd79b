package cbf

import (
	"encoding/binary"
	"math"
	"slices"
)

// DefaultMaxFrames is the number of frames a record may decode to when
// Decoder.MaxFrames is zero. A rep instruction of a few bytes stands for up
// to a million frames, so without a budget a small input could demand a
// lot of memory.
const DefaultMaxFrames = 65536

// Decoder reads CBF records. The zero value is a strict decoder with the
// default frame budget.
type Decoder struct {
	// MaxFrames caps the frames one record may decode to; 0 means
	// DefaultMaxFrames.
	MaxFrames int
	// Swift makes the decoder behave as the Swift runtime's: it never
	// fails, and where the strict decoder would report an error it returns
	// the frames decoded so far followed by a Truncated frame (or no frames
	// at all for a bad info byte). It also accepts the records of Swift 6.2
	// and earlier, which have no end byte. A record over the frame budget
	// ends with Truncated too.
	Swift bool
}

// Decode decodes the record at the start of src with a strict Decoder.
func Decode(dst []Frame, src []byte) ([]Frame, int, error) {
	var d Decoder
	return d.Decode(dst, src)
}

// Decode appends the frames of the CBF record at the start of src to dst
// and returns them with the length of the record, so records laid end to
// end can be read one after another. When dst has room for the frames
// nothing is allocated.
//
// The strict decoder rejects, with a *FormatError naming the offset and the
// instruction: an info byte other than 00, 01 or 02, a reserved opcode, an
// address longer than the word, a rep before any frame, a rep or omit count
// of zero or wider than 8 bytes, an omit count above 2^63-1, a rep count
// above MaxRepeat+1, a record over the frame budget, and input ending before
// end or trunc. The frames decoded before the error are returned with it.
func (d Decoder) Decode(dst []Frame, src []byte) ([]Frame, int, error) {
	if len(src) == 0 {
		if d.Swift {
			return dst, 0, nil
		}
		return dst, 0, formatErr(0, "info byte", "missing")
	}
	ws, ok := parseInfo(src[0])
	if !ok {
		if d.Swift {
			return dst, 1, nil
		}
		return dst, 0, formatErr(0, "info byte", "0x%02x is not version 0 with a 16-, 32- or 64-bit word", src[0])
	}
	maxFrames := d.MaxFrames
	if maxFrames <= 0 {
		maxFrames = DefaultMaxFrames
	}
	start := len(dst)
	budget := start + maxFrames
	mask, wordBytes := ws.Mask(), ws.Bytes()
	var last uint64
	i := 1
	for {
		if i >= len(src) {
			return d.fail(dst, i, "opcode", "input ends before end or trunc")
		}
		op, at := src[i], i
		i++
		switch {
		case op-opPC < opOmit-opPC: // pc, ra, async: by far the most common
			n := int(op&7) + 1
			if i+n > len(src) {
				return d.fail(dst, at, addrField(op), "%d address bytes run past the input", n)
			}
			if n > wordBytes && !d.Swift {
				return d.fail(dst, at, addrField(op), "%d address bytes exceed the %d-bit word", n, ws.Bits())
			}
			v := signExtend(loadBE(src, i, n), 8*n)
			i += n
			if op&opAbs == 0 {
				v += last
			}
			last = v & mask
			if len(dst) >= budget {
				return d.fail(dst, at, "record", "decodes to more than %d frames", maxFrames)
			}
			// The opcode's high nibble (1, 2, 3) is the Kind (PC, RA, Async).
			dst = append(dst, Frame{Kind: Kind(op >> 4), Addr: last})
		case op == opEnd:
			return dst, i, nil
		case op == opTrunc:
			return append(dst, Frame{Kind: Truncated}), i, nil
		case op < opPC || op >= opRep+0x10:
			return d.fail(dst, at, "opcode", "0x%02x is reserved", op)
		case op < opRep:
			n := uint64(op&0x1f) + 1
			if op&opOmitExt != 0 {
				nb := int(n)
				if i+nb > len(src) {
					return d.fail(dst, at, "omit", "%d count bytes run past the input", nb)
				}
				if !d.Swift && nb > 8 {
					return d.fail(dst, at, "omit", "count of %d bytes is wider than 8", nb)
				}
				n = 0
				for _, c := range src[i : i+nb] {
					n = n<<8 | uint64(c) // Swift shifts oversized counts in unchecked
				}
				i += nb
				if !d.Swift && (n == 0 || n > math.MaxInt64) {
					return d.fail(dst, at, "omit", "count %d out of range 1..2^63-1", n)
				}
			}
			if len(dst) >= budget {
				return d.fail(dst, at, "record", "decodes to more than %d frames", maxFrames)
			}
			dst = append(dst, Frame{Kind: Omit, Omitted: n})
		default: // rep
			if len(dst) == start {
				return d.fail(dst, at, "rep", "no frame to repeat")
			}
			n := uint64(op&7) + 1
			if op&opRepExt != 0 {
				nb := int(n)
				if i+nb > len(src) {
					return d.fail(dst, at, "rep", "%d count bytes run past the input", nb)
				}
				n = readBE(src[i : i+nb])
				i += nb
				if n == 0 {
					if !d.Swift {
						return d.fail(dst, at, "rep", "count 0")
					}
					n = 1 // Swift adds one copy for a count of 0
				}
			}
			if n > MaxRepeat+1 {
				return d.fail(dst, at, "rep", "count %d above %d", n, MaxRepeat+1)
			}
			if n > uint64(budget-len(dst)) {
				return d.fail(dst, at, "record", "decodes to more than %d frames", maxFrames)
			}
			f := dst[len(dst)-1]
			dst = slices.Grow(dst, int(n))
			for ; n > 0; n-- {
				dst = append(dst, f)
			}
		}
	}
}

// loadBE reads the n ≤ 8 big-endian bytes at src[i:], which must be there,
// with one load when the input has 8 bytes to spare.
func loadBE(src []byte, i, n int) uint64 {
	if i+8 <= len(src) {
		return binary.BigEndian.Uint64(src[i:]) >> (64 - 8*uint(n))
	}
	return readBE(src[i : i+n])
}

func addrField(op byte) string {
	return Kind(op >> 4).String()
}

// fail ends decoding at offset off: with an error in strict mode, with the
// frames so far and a Truncated frame in Swift mode.
func (d Decoder) fail(dst []Frame, off int, field, format string, args ...any) ([]Frame, int, error) {
	if d.Swift {
		return append(dst, Frame{Kind: Truncated}), off, nil
	}
	return dst, off, formatErr(off, field, format, args...)
}
