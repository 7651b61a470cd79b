package sframe

import "fmt"

// Rule is what Lookup finds for a PC: the function's FDE and the row that
// covers the PC.
type Rule struct {
	FDE FDE
	Row Row
}

// Lookup returns the rule for pc, an address in the section's address
// space (the ELF virtual address, not the runtime address of a PIE). It
// reports false when pc is in no function or before the function's first
// row. A V3 function without rows is the outermost frame: its rule's RA
// is LocUndefined.
func (t *Table) Lookup(pc uint64) (Rule, bool) {
	f, i := t.find(pc)
	if f == nil {
		return Rule{}, false
	}
	if i < 0 {
		if !t.outermostFDE(f) {
			return Rule{}, false
		}
		return Rule{FDE: *f, Row: outermostRow()}, true
	}
	return Rule{FDE: *f, Row: t.row(uint32(i))}, true
}

// outermostFDE says f marks the outermost frame by having no rows (V3
// DEFAULT FDEs only; in V1 and V2, and for FLEX, that is a gap).
func (t *Table) outermostFDE(f *FDE) bool {
	return f.nrows == 0 && t.Header.Version == Version3 && f.Type() == FDETypeDefault
}

// find returns the FDE covering pc and the index of the row for it. The
// index is -1 when the FDE has no row for pc; the FDE is nil when no
// function covers pc.
func (t *Table) find(pc uint64) (*FDE, int) {
	// The last FDE starting at or before pc: first its block, then in it.
	blk := lastAtOrBefore(t.coarse, pc)
	if blk < 0 {
		return nil, -1
	}
	lo := blk * coarseStep
	i := lastAtOrBefore(t.starts[lo:min(lo+coarseStep, len(t.starts))], pc)
	f := &t.fdes[lo+i]
	off := pc - f.Start
	if off >= uint64(f.Size) {
		return nil, -1
	}
	if f.PCMask() {
		off %= uint64(f.RepSize)
	}
	// The last row starting at or before off.
	starts := t.rowStart[f.rows : f.rows+f.nrows]
	lo, hi := 0, len(starts)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if uint64(starts[m]) <= off {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == 0 {
		return f, -1
	}
	return f, int(f.rows) + lo - 1
}

// lastAtOrBefore returns the index of the last element of the sorted s
// that is at most v, or -1.
func lastAtOrBefore(s []uint64, v uint64) int {
	lo, hi := 0, len(s)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s[m] <= v {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo - 1
}

// Describe prints a rule for people: the function, the row's offset in
// it, then how to recover CFA, RA and FP, e.g.
//
//	func 0x401000 size 8, row +1: cfa=sp+16 ra=*(cfa-8) fp=*(cfa-16)
//
// "*(...)" reads memory, "same" is an unchanged value (for RA: still in
// the link register), "signed" marks a PAC-signed return address.
func (t *Table) Describe(r Rule) string {
	return fmt.Sprintf("func %#x size %d, row %s", r.FDE.Start, r.FDE.Size, t.formatRow(&r.Row))
}

func (t *Table) formatRow(r *Row) string {
	if r.Outermost() {
		return fmt.Sprintf("+%d outermost (RA undefined)", r.Start)
	}
	s := fmt.Sprintf("+%d cfa=%s ra=%s fp=%s", r.Start, t.formatLoc(r.CFA), t.formatLoc(r.RA), t.formatLoc(r.FP))
	if r.Mangled() {
		s += " signed"
	}
	return s
}

func (t *Table) formatLoc(l Loc) string {
	var s string
	switch l.Kind {
	case LocSame:
		return "same"
	case LocUndefined:
		return "undefined"
	case LocCFA:
		s = fmt.Sprintf("cfa%+d", l.Off)
	default:
		s = fmt.Sprintf("%s%+d", t.arch.RegName(l.Reg), l.Off)
	}
	if l.Deref {
		return "*(" + s + ")"
	}
	return s
}
