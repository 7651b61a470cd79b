package cbf

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
)

// Instruction bytes of CBF (cbf.md §2.1).
const (
	opEnd     = 0x00
	opTrunc   = 0x01
	opPC      = 0x10
	opRA      = 0x20
	opAsync   = 0x30
	opAbs     = 0x08 // in pc/ra/async: the argument is the address itself
	opOmit    = 0x40
	opOmitExt = 0x20 // in omit: the count follows in ccccc+1 bytes
	opRep     = 0x80
	opRepExt  = 0x08 // in rep: the count follows in ccc+1 bytes
)

// MaxRepeat is the largest count one rep instruction may carry. Swift's
// decoder treats a larger count as corrupt, so longer runs take several.
const MaxRepeat = 1 << 20

// maxInlineOmit is the largest omit count Swift writes in the opcode byte.
const maxInlineOmit = 31

// encoder holds the state of one record being written.
type encoder struct {
	buf  []byte
	bits int
	mask uint64
	last uint64 // the previous address; omit and rep leave it alone
}

func newEncoder(dst []byte, ws WordSize) encoder {
	return encoder{buf: append(dst, ws.infoByte()), bits: ws.Bits(), mask: ws.Mask()}
}

// addr writes a pc, ra or async frame: relative to the previous address
// unless the absolute address is strictly shorter, as Swift's encoder does.
func (e *encoder) addr(op byte, a uint64) {
	d := (a - e.last) & e.mask
	e.last = a
	dn := signedLen(signExtend(d, e.bits))
	an := signedLen(signExtend(a, e.bits))
	if an < dn {
		e.put(op|opAbs|byte(an-1), a, an)
		return
	}
	e.put(op|byte(dn-1), d, dn)
}

// put writes an opcode and the low n bytes of v, big-endian.
func (e *encoder) put(op byte, v uint64, n int) {
	l := len(e.buf)
	if cap(e.buf)-l < 9 {
		e.buf = slices.Grow(e.buf, 9)
	}
	e.buf = e.buf[:l+9] // write all 8 bytes, keep n
	e.buf[l] = op
	binary.BigEndian.PutUint64(e.buf[l+1:], v<<(64-8*uint(n)))
	e.buf = e.buf[:l+1+n]
}

// rep writes n more copies of the previous frame.
func (e *encoder) rep(n uint64) {
	for n > 0 {
		k := min(n, MaxRepeat)
		n -= k
		if k <= 8 {
			e.buf = append(e.buf, opRep|byte(k-1))
			continue
		}
		nb := unsignedLen(k)
		e.put(opRep|opRepExt|byte(nb-1), k, nb)
	}
}

func (e *encoder) omit(n uint64) {
	if n <= maxInlineOmit {
		e.buf = append(e.buf, opOmit|byte(n-1))
		return
	}
	nb := unsignedLen(n)
	e.put(opOmit|opOmitExt|byte(nb-1), n, nb)
}

// AppendStack appends the CBF record of a stack as a stack walker returns
// it, leaf first: pcs[0] is the exact PC of the leaf and every other entry a
// return address. truncated says the walk stopped before the outermost frame.
// Addresses are taken modulo the word size.
func AppendStack(dst []byte, ws WordSize, pcs []uint64, truncated bool) []byte {
	e := newEncoder(slices.Grow(dst, 2+9*len(pcs)), ws)
	for i := 0; i < len(pcs); {
		a := pcs[i] & e.mask
		j := i + 1
		if i == 0 {
			e.addr(opPC, a)
		} else {
			e.addr(opRA, a)
			for j < len(pcs) && pcs[j]&e.mask == a {
				j++
			}
			if j > i+1 {
				e.rep(uint64(j - i - 1))
			}
		}
		i = j
	}
	return e.end(truncated)
}

func (e *encoder) end(truncated bool) []byte {
	if truncated {
		return append(e.buf, opTrunc)
	}
	return append(e.buf, opEnd)
}

// AppendFrames appends the CBF record of frames. A Truncated frame must be
// the last one; it ends the record with trunc instead of end. The bytes are
// those Swift's encoder writes for the same frames, plus the end byte that
// Swift releases up to 6.2 leave out.
func AppendFrames(dst []byte, ws WordSize, frames []Frame) ([]byte, error) {
	if !ws.valid() {
		return dst, fmt.Errorf("cbf: invalid word size %d", ws)
	}
	e := newEncoder(dst, ws)
	for i := 0; i < len(frames); {
		f := frames[i]
		f.Addr &= e.mask
		switch f.Kind {
		case PC:
			e.addr(opPC, f.Addr)
		case RA:
			e.addr(opRA, f.Addr)
		case Async:
			e.addr(opAsync, f.Addr)
		case Omit:
			if f.Omitted == 0 || f.Omitted > math.MaxInt64 {
				return dst, fmt.Errorf("cbf: frame %d: omit count %d out of range 1..2^63-1", i, f.Omitted)
			}
			e.omit(f.Omitted)
		case Truncated:
			if i != len(frames)-1 {
				return dst, fmt.Errorf("cbf: frame %d: truncated marker before the last frame", i)
			}
			return e.end(true), nil
		default:
			return dst, fmt.Errorf("cbf: frame %d: invalid kind %d", i, f.Kind)
		}
		j := i + 1
		for j < len(frames) && sameFrame(frames[j], f, e.mask) {
			j++
		}
		e.rep(uint64(j - i - 1))
		i = j
	}
	return e.end(false), nil
}

// sameFrame reports whether g repeats f (whose address is already masked).
func sameFrame(g, f Frame, mask uint64) bool {
	if g.Kind != f.Kind {
		return false
	}
	if f.Kind == Omit {
		return g.Omitted == f.Omitted
	}
	return g.Addr&mask == f.Addr
}
