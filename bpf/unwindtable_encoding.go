package bpf

import (
	"encoding/binary"
	"fmt"
)

// The encoding of an UnwindTable, for a store to keep beside the SFrame
// table it was converted from (unwind.Store.SaveDerived): parsing it
// costs a fraction of what reading the SFrame table and converting it
// again does (BenchmarkParseUnwindTable, BenchmarkNewUnwindTable), which
// a new process's samples wait for. Little-endian:
//
//	offset  size    field
//	0       8       magic "SPRFBPT1"
//	8       8       Base
//	16      4       rows R (at least 1)
//	20      4       rules N
//	24      4       Unsupported
//	28      4       reserved, zero
//	32      8 R     rows: pc offset, rule index (u32 each)
//	32+8R   12 N    rules: cfa_off (i32), ra_off, fp_off (i16), kind, flags (u8), zero (u16)
//
// The page index is not kept: it is rebuilt from the rows.
const (
	tableMagic       = "SPRFBPT1"
	tableHeaderBytes = 32
	rowBytes         = 8
	ruleBytes        = 12
)

// MarshalBinary encodes t.
func (t *UnwindTable) MarshalBinary() ([]byte, error) {
	if len(t.rows) == 0 {
		return nil, fmt.Errorf("unwind table: no rows to encode")
	}
	b := make([]byte, tableHeaderBytes+rowBytes*len(t.rows)+ruleBytes*len(t.rules))
	copy(b, tableMagic)
	le := binary.LittleEndian
	le.PutUint64(b[8:], t.Base)
	le.PutUint32(b[16:], uint32(len(t.rows)))
	le.PutUint32(b[20:], uint32(len(t.rules)))
	le.PutUint32(b[24:], uint32(t.Unsupported))
	p := b[tableHeaderBytes:]
	for _, r := range t.rows {
		le.PutUint32(p, r.PC)
		le.PutUint32(p[4:], r.Rule)
		p = p[rowBytes:]
	}
	for _, r := range t.rules {
		le.PutUint32(p, uint32(r.CFAOff))
		le.PutUint16(p[4:], uint16(r.RAOff))
		le.PutUint16(p[6:], uint16(r.FPOff))
		p[8], p[9] = r.Kind, r.Flags
		p = p[ruleBytes:]
	}
	return b, nil
}

// TableError says where an encoded UnwindTable is wrong: the field at
// Offset.
type TableError struct {
	Offset int
	Field  string
	Err    error
}

func (e *TableError) Error() string {
	return fmt.Sprintf("encoded unwind table: offset %d, %s: %v", e.Offset, e.Field, e.Err)
}

// ParseUnwindTable decodes what MarshalBinary encoded, checking it as
// untrusted input: the lengths against the bytes given, rows in strictly
// increasing order with a rule that exists, rules the walk knows.
func ParseUnwindTable(b []byte) (*UnwindTable, error) {
	bad := func(off int, field, format string, args ...any) error {
		return &TableError{Offset: off, Field: field, Err: fmt.Errorf(format, args...)}
	}
	if len(b) < tableHeaderBytes {
		return nil, bad(0, "header", "%d bytes, fewer than %d", len(b), tableHeaderBytes)
	}
	if string(b[:8]) != tableMagic {
		return nil, bad(0, "magic", "%q, want %q", b[:8], tableMagic)
	}
	le := binary.LittleEndian
	nrows, nrules, unsupported := uint64(le.Uint32(b[16:])), uint64(le.Uint32(b[20:])), le.Uint32(b[24:])
	if nrows == 0 {
		return nil, bad(16, "rows", "none")
	}
	if want := tableHeaderBytes + rowBytes*nrows + ruleBytes*nrules; uint64(len(b)) != want {
		return nil, bad(16, "rows and rules", "%d and %d take %d bytes, the table has %d", nrows, nrules, want, len(b))
	}
	if le.Uint32(b[28:]) != 0 {
		return nil, bad(28, "reserved", "%#x, want 0", le.Uint32(b[28:]))
	}
	if uint64(unsupported) > nrows {
		return nil, bad(24, "unsupported", "%d of %d rows", unsupported, nrows)
	}
	t := &UnwindTable{Base: le.Uint64(b[8:]), rows: make([]unwindRow, nrows), rules: make([]unwindRule, nrules), Unsupported: int(unsupported)}
	off := tableHeaderBytes
	for i := range t.rows {
		r := unwindRow{PC: le.Uint32(b[off:]), Rule: le.Uint32(b[off+4:])}
		if i > 0 && r.PC <= t.rows[i-1].PC {
			return nil, bad(off, "row pc", "%#x after %#x", r.PC, t.rows[i-1].PC)
		}
		if uint64(r.Rule) >= nrules {
			return nil, bad(off+4, "row rule", "%d of %d rules", r.Rule, nrules)
		}
		t.rows[i] = r
		off += rowBytes
	}
	for i := range t.rules {
		p := b[off : off+ruleBytes]
		r := unwindRule{CFAOff: int32(le.Uint32(p)), RAOff: int16(le.Uint16(p[4:])), FPOff: int16(le.Uint16(p[6:])), Kind: p[8], Flags: p[9]}
		switch {
		case r.Kind > ruleUnsupported:
			return nil, bad(off+8, "rule kind", "%d", r.Kind)
		case r.Flags&^(ruleRASaved|ruleFPSaved) != 0:
			return nil, bad(off+9, "rule flags", "%#x", r.Flags)
		case le.Uint16(p[10:]) != 0:
			return nil, bad(off+10, "rule padding", "%#x, want 0", le.Uint16(p[10:]))
		}
		t.rules[i] = r
		off += ruleBytes
	}
	(&tableBuilder{t: t}).index()
	return t, nil
}
