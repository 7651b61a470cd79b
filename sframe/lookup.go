package sframe

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
	f, r := t.find(pc)
	if f == nil {
		return Rule{}, false
	}
	if r == nil {
		if !t.outermostFDE(f) {
			return Rule{}, false
		}
		return Rule{FDE: *f, Row: Row{RA: Loc{Kind: LocUndefined}}}, true
	}
	return Rule{FDE: *f, Row: *r}, true
}

// outermostFDE says f marks the outermost frame by having no rows (V3
// DEFAULT FDEs only; in V1 and V2, and for FLEX, that is a gap).
func (t *Table) outermostFDE(f *FDE) bool {
	return f.nrows == 0 && t.Header.Version == Version3 && f.Type() == FDETypeDefault
}

// find returns the FDE covering pc and the row for it. The row is nil when
// the FDE has no row for pc; the FDE is nil when no function covers pc.
func (t *Table) find(pc uint64) (*FDE, *Row) {
	// The last FDE starting at or before pc.
	lo, hi := 0, len(t.fdes)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if t.fdes[m].Start <= pc {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == 0 {
		return nil, nil
	}
	f := &t.fdes[lo-1]
	off := pc - f.Start
	if off >= uint64(f.Size) {
		return nil, nil
	}
	if f.PCMask() {
		off %= uint64(f.RepSize)
	}
	// The last row starting at or before off.
	rows := t.rows[f.rows : f.rows+f.nrows]
	lo, hi = 0, len(rows)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if uint64(rows[m].Start) <= off {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == 0 {
		return f, nil
	}
	return f, &rows[lo-1]
}
