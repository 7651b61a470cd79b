package synth

import (
	"github.com/sprof/sprof/sframe"
	"github.com/sprof/sprof/sframe/cfi"
)

// DWARF expression opcodes of the amd64 PLT rule.
const (
	opLit0  = 0x30
	opBreg7 = 0x77 // rsp
	opBreg  = 0x70
	opAnd   = 0x1a
	opGE    = 0x2a
	opShl   = 0x24
	opPlus  = 0x22
	ripReg  = 16
)

// pltRule is CFA = rsp + base + ((rip & (rep-1)) >= threshold ? 8 : 0).
type pltRule struct {
	base      int64
	rep       uint64
	threshold uint64
}

// parsePLTRule recognizes the expression GNU ld writes for the amd64 lazy
// PLT: DW_OP_breg7 base; DW_OP_breg16 0; DW_OP_lit<rep-1>; DW_OP_and;
// DW_OP_lit<threshold>; DW_OP_ge; DW_OP_lit3; DW_OP_shl; DW_OP_plus.
func parsePLTRule(e []byte) (pltRule, bool) {
	var p pltRule
	i := 0
	next := func() (byte, bool) {
		if i >= len(e) {
			return 0, false
		}
		i++
		return e[i-1], true
	}
	sleb := func() (int64, bool) {
		var v int64
		for shift := uint(0); shift < 64; shift += 7 {
			b, ok := next()
			if !ok {
				return 0, false
			}
			v |= int64(b&0x7f) << shift
			if b&0x80 == 0 {
				if shift+7 < 64 && b&0x40 != 0 {
					v |= -1 << (shift + 7)
				}
				return v, true
			}
		}
		return 0, false
	}
	want := func(op byte) bool { b, ok := next(); return ok && b == op }
	lit := func() (uint64, bool) {
		b, ok := next()
		return uint64(b - opLit0), ok && b >= opLit0 && b < opLit0+32
	}
	if !want(opBreg7) {
		return p, false
	}
	base, ok := sleb()
	if !ok || !want(opBreg+ripReg) {
		return p, false
	}
	if zero, ok := sleb(); !ok || zero != 0 {
		return p, false
	}
	mask, ok := lit()
	if !ok || mask&(mask+1) != 0 || !want(opAnd) {
		return p, false
	}
	threshold, ok := lit()
	if !ok || threshold > mask || !want(opGE) {
		return p, false
	}
	if three, ok := lit(); !ok || three != 3 || !want(opShl) || !want(opPlus) || i != len(e) {
		return p, false
	}
	return pltRule{base: base, rep: mask + 1, threshold: threshold}, true
}

// pltFunction turns a row whose CFA is the PLT expression, applying from
// r.Start up to end, into a PCMASK function. The expression masks the
// absolute PC, SFrame the offset from the function's start: the two agree
// when the start is aligned to the block size. The stubs must fill the
// range: a partial block is not a PLT.
func (s *synthesizer) pltFunction(r *cfi.Row, end uint64) (sframe.Function, bool) {
	if s.abi != sframe.ABIAMD64LE || r.CFA.Kind != cfi.CFAExpression {
		return sframe.Function{}, false
	}
	p, ok := parsePLTRule(r.CFA.Expr)
	if !ok || r.Start%p.rep != 0 || (end-r.Start)%p.rep != 0 || r.Regs[1].Kind != cfi.RuleOffset || r.Regs[1].Offset != -8 ||
		(r.Regs[0].Kind != cfi.RuleUnspecified && r.Regs[0].Kind != cfi.RuleSameValue) {
		return sframe.Function{}, false
	}
	lo, ok1 := fits32(p.base)
	hi, ok2 := fits32(p.base + 8)
	if !ok1 || !ok2 {
		return sframe.Function{}, false
	}
	row := func(start uint64, off int32) sframe.Row {
		return sframe.Row{
			Start: uint32(start),
			CFA:   sframe.Loc{Kind: sframe.LocReg, Reg: uint8(s.regs.sp), Off: off},
			RA:    sframe.Loc{Kind: sframe.LocCFA, Deref: true, Off: -8},
			FP:    sframe.Loc{Kind: sframe.LocSame},
		}
	}
	f := sframe.Function{Start: r.Start, Size: uint32(end - r.Start), RepSize: uint8(p.rep)}
	if p.threshold > 0 {
		f.Rows = append(f.Rows, row(0, lo))
	}
	f.Rows = append(f.Rows, row(p.threshold, hi))
	return f, true
}
