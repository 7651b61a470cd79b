package cbf

import (
	"fmt"
	"math/bits"
)

// WordSize is the width of the addresses a CBF record or an image map holds.
// Its value is the size field of the info byte that starts both formats.
type WordSize uint8

const (
	Word16 WordSize = 0
	Word32 WordSize = 1
	Word64 WordSize = 2
)

// Bits returns the word size in bits: 16, 32 or 64.
func (w WordSize) Bits() int { return 16 << w }

// Bytes returns the word size in bytes: 2, 4 or 8.
func (w WordSize) Bytes() int { return 2 << w }

// Mask returns the largest address of the word size.
func (w WordSize) Mask() uint64 { return ^uint64(0) >> (64 - w.Bits()) }

func (w WordSize) valid() bool { return w <= Word64 }

func (w WordSize) String() string {
	if !w.valid() {
		return fmt.Sprintf("WordSize(%d)", uint8(w))
	}
	return fmt.Sprintf("%d-bit", w.Bits())
}

// infoByte is the byte that starts a CBF record or a CIF map: version 0 and
// the word size.
func (w WordSize) infoByte() byte { return byte(w) }

// parseInfo reads an info byte; only version 0 with a defined size is valid.
func parseInfo(b byte) (WordSize, bool) {
	ws := WordSize(b & 3)
	return ws, b>>2 == 0 && ws.valid()
}

// Kind says what a Frame is.
type Kind uint8

const (
	// PC is an exact program counter: the leaf frame, or the frame
	// interrupted by a signal. It is symbolized at its address.
	PC Kind = iota + 1
	// RA is a return address. The call lies just before it, so it is
	// symbolized at Addr-1.
	RA
	// Async is the resume point of an async function, symbolized as is.
	// Decoders accept it; sprof never writes it.
	Async
	// Omit stands for Omitted frames left out of the stack, by a limiter
	// keeping its two ends.
	Omit
	// Truncated marks the end of a stack that was cut short: the frames
	// before it are real, the outermost ones are missing.
	Truncated
)

func (k Kind) String() string {
	switch k {
	case PC:
		return "pc"
	case RA:
		return "ra"
	case Async:
		return "async"
	case Omit:
		return "omit"
	case Truncated:
		return "truncated"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Frame is one entry of a decoded stack.
type Frame struct {
	Kind Kind
	// Addr is the address of a PC, RA or Async frame.
	Addr uint64
	// Omitted is the number of frames an Omit frame stands for.
	Omitted uint64
}

// SymbolAddr is the address to symbolize the frame at: Addr-1 for a return
// address, so a call at the end of a function is not attributed to the
// next one, and Addr otherwise.
func (f Frame) SymbolAddr() uint64 {
	if f.Kind == RA {
		return f.Addr - 1
	}
	return f.Addr
}

func (f Frame) String() string {
	switch f.Kind {
	case PC, RA, Async:
		return fmt.Sprintf("%s 0x%x", f.Kind, f.Addr)
	case Omit:
		return fmt.Sprintf("omit %d", f.Omitted)
	}
	return f.Kind.String()
}

// FormatError reports malformed input: where it is and which field of the
// format it broke, in the manner of debug/elf's FormatError.
type FormatError struct {
	// Offset is the byte offset of the offending field in the input.
	Offset int64
	// Field names the instruction or field being read.
	Field string
	// Msg says what is wrong with it.
	Msg string
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("%s at offset %d: %s", e.Field, e.Offset, e.Msg)
}

func formatErr(off int, field, format string, args ...any) *FormatError {
	return &FormatError{Offset: int64(off), Field: field, Msg: fmt.Sprintf(format, args...)}
}

// signedLen is the smallest n ≥ 1 such that the low n bytes of v,
// sign-extended, give v back.
func signedLen(v uint64) int {
	v ^= uint64(int64(v) >> 63) // the bits that differ from the sign
	return 8 - (bits.LeadingZeros64(v)-1)>>3
}

// unsignedLen is the smallest n ≥ 1 such that the low n bytes of v hold v.
func unsignedLen(v uint64) int {
	return max(1, (bits.Len64(v)+7)>>3)
}

// signExtend widens the low bits of v to 64 bits by copying its top bit.
func signExtend(v uint64, bits int) uint64 {
	s := uint(64 - bits)
	return uint64(int64(v<<s) >> s)
}

// appendBE appends the low n bytes of v, most significant first.
func appendBE(dst []byte, v uint64, n int) []byte {
	for i := n - 1; i >= 0; i-- {
		dst = append(dst, byte(v>>(8*uint(i))))
	}
	return dst
}

// readBE reads n ≤ 8 big-endian bytes.
func readBE(b []byte) uint64 {
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v
}
