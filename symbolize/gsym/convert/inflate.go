package convert

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/adler32"
)

// zlibInflate decompresses the zlib stream src (RFC 1950, deflate RFC
// 1951) into dst, whose length is the decompressed size that the ELF
// compression header states: a stream that makes more or less is an error,
// as is a bad checksum.
//
// compress/flate reads its input a byte at a time through an interface
// and writes through a sliding window; Go binaries carry megabytes of
// zlib-compressed DWARF, and inflating .debug_info was the longest step
// before conversion could start. This decoder reads eight bytes at a time
// into a bit buffer, decodes each code with one table lookup, and copies
// matches inside dst, which it knows the size of.
func zlibInflate(dst, src []byte) error {
	if len(src) < 2 {
		return errors.New("zlib: truncated header")
	}
	cmf, flg := src[0], src[1]
	if cmf&0x0f != 8 || cmf>>4 > 7 || (uint(cmf)<<8|uint(flg))%31 != 0 {
		return errors.New("zlib: bad header")
	}
	if flg&0x20 != 0 {
		return errors.New("zlib: preset dictionary")
	}
	in := inflater{src: src, pos: 2, dst: dst}
	if err := in.run(); err != nil {
		return err
	}
	if in.op != len(dst) {
		return fmt.Errorf("zlib: %d bytes, expected %d", in.op, len(dst))
	}
	// The checksum follows the last block, from the next byte boundary.
	at := (in.consumed() + 7) / 8
	if at+4 > len(src) {
		return errors.New("zlib: truncated checksum")
	}
	if binary.BigEndian.Uint32(src[at:]) != adler32.Checksum(dst) {
		return errors.New("zlib: checksum mismatch")
	}
	return nil
}

// huffTable maps the next maxLen bits of input (least significant bit
// first) to sym<<4 | length; 0 is an invalid code.
type huffTable struct {
	maxLen uint
	t      []uint32
}

// build makes the canonical Huffman code of lengths (0: unused symbol).
func (h *huffTable) build(lengths []uint8) error {
	var count [16]int
	maxLen := uint(0)
	for _, l := range lengths {
		count[l]++
		maxLen = max(maxLen, uint(l))
	}
	count[0] = 0
	if maxLen == 0 {
		// A distance code with no codes: only literals follow.
		h.maxLen = 1
		h.t = append(h.t[:0], 0, 0)
		return nil
	}
	left := 1
	var next [16]uint32
	code := uint32(0)
	for l := 1; l <= 15; l++ {
		left = left<<1 - count[l]
		if left < 0 {
			return errors.New("deflate: over-subscribed code")
		}
		code = (code + uint32(count[l-1])) << 1
		next[l] = code
	}
	size := 1 << maxLen
	if cap(h.t) < size {
		h.t = make([]uint32, size)
	}
	h.t, h.maxLen = h.t[:size], maxLen
	if left != 0 {
		clear(h.t) // an incomplete code leaves entries unfilled: invalid
	}
	for sym, l := range lengths {
		if l == 0 {
			continue
		}
		c := next[l]
		next[l]++
		// Codes are sent most significant bit first: reverse them to
		// index by the bits as they arrive.
		r := uint32(0)
		for i := uint8(0); i < l; i++ {
			r = r<<1 | c&1
			c >>= 1
		}
		e := uint32(sym)<<4 | uint32(l)
		for i := int(r); i < size; i += 1 << l {
			h.t[i] = e
		}
	}
	return nil
}

// inflater is the state of one deflate stream.
type inflater struct {
	src     []byte
	pos     int    // next byte of src to load into bits
	bits    uint64 // input not yet used, least significant bit first
	nbits   uint
	padding int // zero bytes loaded past the end of src (counted in pos)
	dst     []byte
	op      int
	lit     huffTable
	dist    huffTable
	cl      huffTable
}

// consumed is the number of input bits used so far, more than src holds
// when the stream ran past its end.
func (in *inflater) consumed() int { return in.pos*8 - int(in.nbits) }

// refill loads input until at least 56 bits are buffered; past the end of
// src it loads zeros, which need may then find were used.
func (in *inflater) refill() {
	if in.pos+8 <= len(in.src) {
		in.bits |= binary.LittleEndian.Uint64(in.src[in.pos:]) << in.nbits
		in.pos += int(63-in.nbits) >> 3
		in.nbits |= 56
		return
	}
	for in.nbits <= 56 {
		if in.pos < len(in.src) {
			in.bits |= uint64(in.src[in.pos]) << in.nbits
		} else {
			in.padding++
		}
		in.pos++
		in.nbits += 8
	}
}

func (in *inflater) take(n uint) uint64 {
	if in.nbits < n {
		in.refill()
	}
	v := in.bits & (1<<n - 1)
	in.bits >>= n
	in.nbits -= n
	return v
}

// sym decodes one symbol of h; the caller has refilled.
func (in *inflater) sym(h *huffTable) (int, error) {
	e := h.t[in.bits&(1<<h.maxLen-1)]
	l := uint(e & 15)
	if l == 0 {
		return 0, errors.New("deflate: invalid code")
	}
	in.bits >>= l
	in.nbits -= l
	return int(e >> 4), nil
}

var (
	lengthBase  = [29]uint16{3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258}
	lengthExtra = [29]uint8{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0}
	distBase    = [30]uint32{1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577}
	distExtra   = [30]uint8{0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13}
	clOrder     = [19]uint8{16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15}
)

func (in *inflater) run() error {
	for {
		final := in.take(1)
		var err error
		switch in.take(2) {
		case 0:
			err = in.stored()
		case 1:
			err = in.fixed()
		case 2:
			err = in.dynamic()
		default:
			err = errors.New("deflate: reserved block type")
		}
		if err != nil {
			return err
		}
		if in.consumed() > len(in.src)*8 {
			return errors.New("deflate: truncated")
		}
		if final == 1 {
			return nil
		}
	}
}

func (in *inflater) stored() error {
	// Back to a byte boundary, and return whole buffered bytes to src.
	in.take(in.nbits % 8)
	in.pos -= int(in.nbits / 8)
	in.bits, in.nbits = 0, 0
	if in.padding > 0 || in.pos+4 > len(in.src) {
		return errors.New("deflate: truncated stored block")
	}
	n := int(binary.LittleEndian.Uint16(in.src[in.pos:]))
	if binary.LittleEndian.Uint16(in.src[in.pos+2:]) != ^uint16(n) {
		return errors.New("deflate: bad stored block length")
	}
	in.pos += 4
	if in.pos+n > len(in.src) || in.op+n > len(in.dst) {
		return errors.New("deflate: stored block past the end")
	}
	copy(in.dst[in.op:], in.src[in.pos:in.pos+n])
	in.pos += n
	in.op += n
	return nil
}

func (in *inflater) fixed() error {
	var l [288 + 32]uint8
	for i := range 288 {
		switch {
		case i < 144:
			l[i] = 8
		case i < 256:
			l[i] = 9
		case i < 280:
			l[i] = 7
		default:
			l[i] = 8
		}
	}
	for i := range 30 {
		l[288+i] = 5
	}
	if err := in.lit.build(l[:288]); err != nil {
		return err
	}
	if err := in.dist.build(l[288:318]); err != nil {
		return err
	}
	return in.codes()
}

func (in *inflater) dynamic() error {
	nlit := int(in.take(5)) + 257
	ndist := int(in.take(5)) + 1
	nclen := int(in.take(4)) + 4
	if nlit > 286 || ndist > 30 {
		return errors.New("deflate: too many codes")
	}
	var cl [19]uint8
	for i := range nclen {
		cl[clOrder[i]] = uint8(in.take(3))
	}
	if err := in.cl.build(cl[:]); err != nil {
		return err
	}
	var lengths [286 + 30]uint8
	for i := 0; i < nlit+ndist; {
		in.refill()
		s, err := in.sym(&in.cl)
		if err != nil {
			return err
		}
		var rep int
		var val uint8
		switch {
		case s < 16:
			lengths[i] = uint8(s)
			i++
			continue
		case s == 16:
			if i == 0 {
				return errors.New("deflate: repeat with no previous length")
			}
			val, rep = lengths[i-1], 3+int(in.take(2))
		case s == 17:
			rep = 3 + int(in.take(3))
		default:
			rep = 11 + int(in.take(7))
		}
		if i+rep > nlit+ndist {
			return errors.New("deflate: code lengths overflow")
		}
		for ; rep > 0; rep-- {
			lengths[i] = val
			i++
		}
	}
	if lengths[256] == 0 {
		return errors.New("deflate: no end-of-block code")
	}
	if err := in.lit.build(lengths[:nlit]); err != nil {
		return err
	}
	if err := in.dist.build(lengths[nlit : nlit+ndist]); err != nil {
		return err
	}
	return in.codes()
}

// codes decodes a block's literals and matches up to its end code. The
// bit buffer lives in locals here, where nearly all the time goes.
func (in *inflater) codes() error {
	dst, op := in.dst, in.op
	src, pos, bits, nbits, padding := in.src, in.pos, in.bits, in.nbits, in.padding
	lit, litMask := in.lit.t, uint64(1)<<in.lit.maxLen-1
	dist, distMask := in.dist.t, uint64(1)<<in.dist.maxLen-1
	save := func() {
		in.op, in.pos, in.bits, in.nbits, in.padding = op, pos, bits, nbits, padding
	}
	// Bound the loop by input: each symbol takes at least one bit, and
	// past the end of src only zeros (padding) arrive.
	for padding <= 8 {
		// Refill to at least 56 bits: enough for a length code, its
		// extra bits, a distance code and its extra bits (48).
		if pos+8 <= len(src) {
			bits |= binary.LittleEndian.Uint64(src[pos:]) << nbits
			pos += int(63-nbits) >> 3
			nbits |= 56
		} else {
			for nbits <= 56 {
				if pos < len(src) {
					bits |= uint64(src[pos]) << nbits
				} else {
					padding++
				}
				pos++
				nbits += 8
			}
		}
		e := lit[bits&litMask]
		l := uint(e & 15)
		if l == 0 {
			return errors.New("deflate: invalid code")
		}
		bits >>= l
		nbits -= l
		s := int(e >> 4)
		if s < 256 {
			if op >= len(dst) {
				return errors.New("deflate: output past the stated size")
			}
			dst[op] = byte(s)
			op++
			continue
		}
		if s == 256 {
			save()
			return nil
		}
		s -= 257
		if s >= 29 {
			return errors.New("deflate: bad length code")
		}
		x := uint(lengthExtra[s])
		n := int(lengthBase[s]) + int(bits&(1<<x-1))
		bits >>= x
		nbits -= x
		e = dist[bits&distMask]
		l = uint(e & 15)
		if l == 0 {
			return errors.New("deflate: invalid distance code")
		}
		bits >>= l
		nbits -= l
		d := int(e >> 4)
		if d >= 30 {
			return errors.New("deflate: bad distance code")
		}
		x = uint(distExtra[d])
		back := int(distBase[d]) + int(bits&(1<<x-1))
		bits >>= x
		nbits -= x
		if back > op {
			return errors.New("deflate: distance before the start")
		}
		if op+n > len(dst) {
			return errors.New("deflate: output past the stated size")
		}
		if back >= n {
			copy(dst[op:op+n], dst[op-back:])
		} else {
			for i := range n {
				dst[op+i] = dst[op-back+i]
			}
		}
		op += n
	}
	return errors.New("deflate: truncated")
}
