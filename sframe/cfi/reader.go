package cfi

import "encoding/binary"

// reader decodes fields of a section with bounds checks. Its errors name
// the offset of the field and the field; field names are constants, so a
// successful read allocates nothing.
type reader struct {
	data  []byte
	off   uint64 // next byte to read, an offset in data
	end   uint64 // reads stop here (the end of the current entry)
	order binary.ByteOrder
}

func (r *reader) short(field string, n uint64) error {
	return formatErr(r.off, field, "%d bytes needed, %d left", n, r.end-min(r.off, r.end))
}

// take returns the next n bytes.
func (r *reader) take(field string, n uint64) ([]byte, error) {
	if r.off > r.end || n > r.end-r.off {
		return nil, r.short(field, n)
	}
	b := r.data[r.off : r.off+n]
	r.off += n
	return b, nil
}

func (r *reader) u8(field string) (uint8, error) {
	b, err := r.take(field, 1)
	if err != nil {
		return 0, err
	}
	return b[0], nil
}

func (r *reader) u16(field string) (uint16, error) {
	b, err := r.take(field, 2)
	if err != nil {
		return 0, err
	}
	return r.order.Uint16(b), nil
}

func (r *reader) u32(field string) (uint32, error) {
	b, err := r.take(field, 4)
	if err != nil {
		return 0, err
	}
	return r.order.Uint32(b), nil
}

func (r *reader) u64(field string) (uint64, error) {
	b, err := r.take(field, 8)
	if err != nil {
		return 0, err
	}
	return r.order.Uint64(b), nil
}

// uint reads an unsigned integer of size bytes (1, 2, 4 or 8).
func (r *reader) uint(field string, size uint8) (uint64, error) {
	switch size {
	case 1:
		v, err := r.u8(field)
		return uint64(v), err
	case 2:
		v, err := r.u16(field)
		return uint64(v), err
	case 4:
		v, err := r.u32(field)
		return uint64(v), err
	case 8:
		return r.u64(field)
	}
	return 0, formatErr(r.off, field, "integer size %d", size)
}

// maxLEB128 is the longest LEB128 encoding of a 64-bit value.
const maxLEB128 = 10

func (r *reader) uleb(field string) (uint64, error) {
	start := r.off
	var v uint64
	for i := uint(0); ; i++ {
		if i == maxLEB128 {
			return 0, formatErr(start, field, "ULEB128 longer than %d bytes", maxLEB128)
		}
		b, err := r.u8(field)
		if err != nil {
			return 0, err
		}
		if i == 9 && b > 1 {
			return 0, formatErr(start, field, "ULEB128 overflows 64 bits")
		}
		v |= uint64(b&0x7f) << (7 * i)
		if b&0x80 == 0 {
			return v, nil
		}
	}
}

func (r *reader) sleb(field string) (int64, error) {
	start := r.off
	var v int64
	for i := uint(0); ; i++ {
		if i == maxLEB128 {
			return 0, formatErr(start, field, "SLEB128 longer than %d bytes", maxLEB128)
		}
		b, err := r.u8(field)
		if err != nil {
			return 0, err
		}
		v |= int64(b&0x7f) << (7 * i)
		if b&0x80 == 0 {
			if shift := 7 * (i + 1); shift < 64 && b&0x40 != 0 {
				v |= -1 << shift
			}
			return v, nil
		}
	}
}

// cstring reads a NUL-terminated string.
func (r *reader) cstring(field string) (string, error) {
	for i := r.off; i < r.end; i++ {
		if r.data[i] == 0 {
			s := string(r.data[r.off:i])
			r.off = i + 1
			return s, nil
		}
	}
	return "", formatErr(r.off, field, "string not terminated")
}

// block reads a ULEB128 length and that many bytes (a DWARF expression).
func (r *reader) block(field string) ([]byte, error) {
	n, err := r.uleb(field)
	if err != nil {
		return nil, err
	}
	return r.take(field, n)
}
