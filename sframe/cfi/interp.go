package cfi

import (
	"fmt"
	"math"
	"slices"
)

// Limits on what one FDE may make the interpreter do.
const (
	// MaxTracked is how many registers an Interpreter reports rules for.
	MaxTracked = 4
	// MaxStateDepth bounds DW_CFA_remember_state nesting; compilers
	// nest it once or twice.
	MaxStateDepth = 64
	// MaxRows bounds the rows of one FDE; the largest functions of real
	// binaries have a few thousand.
	MaxRows = 1 << 16
	// MaxCIEInstructions bounds a CIE's initial instructions, which run
	// again for every FDE that does not share the previous FDE's CIE:
	// real ones are a few bytes, and the bound keeps the work of a
	// section close to its size.
	MaxCIEInstructions = 256
)

// RuleKind says how a register of the caller's frame is recovered.
type RuleKind uint8

// Register rule kinds (DWARF 5 section 6.4.1).
const (
	// RuleUnspecified: no instruction mentioned the register. For
	// callee-saved registers this means unchanged in practice.
	RuleUnspecified RuleKind = iota
	// RuleUndefined: the value is lost; for the return address column
	// it marks the outermost frame.
	RuleUndefined
	// RuleSameValue: the register still holds the caller's value.
	RuleSameValue
	// RuleOffset: saved in memory at CFA+Offset.
	RuleOffset
	// RuleValOffset: the value is CFA+Offset itself.
	RuleValOffset
	// RuleRegister: saved in register Reg.
	RuleRegister
	// RuleExpression: saved at the address DWARF expression Expr computes.
	RuleExpression
	// RuleValExpression: the value is what Expr computes.
	RuleValExpression
)

var ruleNames = [...]string{
	RuleUnspecified:   "unspecified",
	RuleUndefined:     "undefined",
	RuleSameValue:     "same_value",
	RuleOffset:        "offset",
	RuleValOffset:     "val_offset",
	RuleRegister:      "register",
	RuleExpression:    "expression",
	RuleValExpression: "val_expression",
}

func (k RuleKind) String() string {
	if int(k) < len(ruleNames) {
		return ruleNames[k]
	}
	return fmt.Sprintf("RuleKind(%d)", uint8(k))
}

// Rule is how to recover one register of the caller.
type Rule struct {
	Kind   RuleKind
	Reg    uint64 // RuleRegister
	Offset int64  // RuleOffset, RuleValOffset
	Expr   []byte // RuleExpression, RuleValExpression; aliases the section
}

// CFAKind says how the canonical frame address is computed.
type CFAKind uint8

// CFA rule kinds.
const (
	// CFAUnset: no instruction defined the CFA.
	CFAUnset CFAKind = iota
	// CFARegOffset: register Reg plus Offset.
	CFARegOffset
	// CFAExpression: what DWARF expression Expr computes.
	CFAExpression
)

func (k CFAKind) String() string {
	switch k {
	case CFAUnset:
		return "unset"
	case CFARegOffset:
		return "reg+offset"
	case CFAExpression:
		return "expression"
	}
	return fmt.Sprintf("CFAKind(%d)", uint8(k))
}

// CFARule is how to compute the canonical frame address: the value of the
// stack pointer in the caller just before the call. Reg and Offset are
// kept while the CFA is an expression: DW_CFA_def_cfa_register and
// DW_CFA_def_cfa_offset update them in any state, as libgcc's unwinder
// does.
type CFARule struct {
	Kind   CFAKind
	Reg    uint64
	Offset int64
	Expr   []byte // CFAExpression only; aliases the section
}

// Row is the unwind state from Start up to the next row's Start (or the
// FDE's end).
type Row struct {
	Start uint64
	CFA   CFARule
	// Regs are the rules of the registers in Interpreter.Track, in
	// that order.
	Regs [MaxTracked]Rule
	// RAMangled says the return address is signed with a pointer
	// authentication code (aarch64 DW_CFA_AARCH64_negate_ra_state).
	RAMangled bool
	// ArgsSize is the DW_CFA_GNU_args_size in effect.
	ArgsSize uint64
}

// Interpreter runs FDE instructions into rows. It reuses its buffers, so
// one Interpreter per goroutine interprets any number of FDEs without
// allocating; the zero value tracks no register.
type Interpreter struct {
	// Track lists the DWARF registers whose rules rows report, in the
	// order of Row.Regs; at most MaxTracked. The CFA is always tracked.
	Track []uint64
	// AArch64 decodes opcode 0x2d as DW_CFA_AARCH64_negate_ra_state
	// (on SPARC it is DW_CFA_GNU_window_save, which is not supported).
	AArch64 bool

	rows  []Row
	stack [MaxStateDepth]Row
	// The state after the last CIE's instructions, when they define no
	// row of their own and leave no remembered state, for the registers
	// and architecture it was computed with.
	cie      *CIE
	cieState Row
	cieTrack []uint64
	cieArm   bool
}

// cached says the cached CIE state applies to c.
func (in *Interpreter) cached(c *CIE) bool {
	return c == in.cie && in.cieArm == in.AArch64 && slices.Equal(in.cieTrack, in.Track)
}

// run is the state of one Rows call.
type run struct {
	in  *Interpreter
	f   *FDE
	cur Row
	// initial is the state after the CIE's instructions, once inFDE.
	initial Row
	inFDE   bool
	depth   int
	done    bool // reached the FDE's end: later instructions never apply
}

// DW_CFA opcodes with operands in the low 6 bits.
const (
	opAdvanceLoc = 0x1
	opOffset     = 0x2
	opRestore    = 0x3
)

// DW_CFA opcodes.
const (
	opNop                   = 0x00
	opSetLoc                = 0x01
	opAdvanceLoc1           = 0x02
	opAdvanceLoc2           = 0x03
	opAdvanceLoc4           = 0x04
	opOffsetExtended        = 0x05
	opRestoreExtended       = 0x06
	opUndefined             = 0x07
	opSameValue             = 0x08
	opRegister              = 0x09
	opRememberState         = 0x0a
	opRestoreState          = 0x0b
	opDefCFA                = 0x0c
	opDefCFARegister        = 0x0d
	opDefCFAOffset          = 0x0e
	opDefCFAExpression      = 0x0f
	opExpression            = 0x10
	opOffsetExtendedSF      = 0x11
	opDefCFASF              = 0x12
	opDefCFAOffsetSF        = 0x13
	opValOffset             = 0x14
	opValOffsetSF           = 0x15
	opValExpression         = 0x16
	opAArch64NegateRAWithPC = 0x2c
	opNegateRAState         = 0x2d // DW_CFA_GNU_window_save on SPARC
	opGNUArgsSize           = 0x2e
	opGNUNegOffsetExtended  = 0x2f
)

// Rows interprets the CIE's initial instructions and then the FDE's, and
// returns the rows, sorted by Start, starting at f.Start. Instructions
// that apply at or after the FDE's end are not run. The slice is reused
// by the next call.
func (in *Interpreter) Rows(f *FDE) ([]Row, error) {
	if len(in.Track) > MaxTracked {
		return nil, fmt.Errorf("cfi: %d registers to track, at most %d", len(in.Track), MaxTracked)
	}
	if f.CIE == nil || f.CIE.Order == nil {
		return nil, fmt.Errorf("cfi: FDE at %#x without a CIE or its byte order", f.Offset)
	}
	in.rows = in.rows[:0]
	st := run{in: in, f: f}
	if err := st.runCIE(); err != nil {
		return nil, err
	}
	st.initial, st.inFDE = st.cur, true
	if !st.done {
		if err := st.exec(f.Instructions, f.InstructionsOff); err != nil {
			return nil, err
		}
	}
	in.rows = append(in.rows, st.cur)
	return in.rows, nil
}

// runCIE sets the state to the one the CIE's initial instructions give,
// from the cache when the FDE shares the previous one's CIE.
func (st *run) runCIE() error {
	in, c := st.in, st.f.CIE
	if in.cached(c) {
		st.cur = in.cieState
		st.cur.Start = st.f.Start
		return nil
	}
	in.cie = nil
	if len(c.Instructions) > MaxCIEInstructions {
		return unsupportedErr(c.InstructionsOff, "cie.initial_instructions", "%d bytes, more than %d", len(c.Instructions), MaxCIEInstructions)
	}
	st.cur.Start = st.f.Start
	if err := st.exec(c.Instructions, c.InstructionsOff); err != nil {
		return err
	}
	if len(in.rows) == 0 && st.depth == 0 && !st.done {
		in.cie, in.cieState, in.cieArm = c, st.cur, in.AArch64
		in.cieTrack = append(in.cieTrack[:0], in.Track...)
	}
	return nil
}

// exec runs a block of instructions that starts at section offset base.
func (st *run) exec(code []byte, base uint64) error {
	// Offsets in errors are section offsets: the reader works on code
	// with base subtracted, so add it back on the way out.
	r := &reader{data: code, end: uint64(len(code)), order: st.f.CIE.Order}
	for r.off < r.end && !st.done {
		if err := st.step(r); err != nil {
			if fe, ok := err.(*FormatError); ok {
				fe.Off += base
			}
			return err
		}
	}
	return nil
}

// step runs one instruction.
func (st *run) step(r *reader) error {
	at := r.off
	op, err := r.u8("DW_CFA.opcode")
	if err != nil {
		return err
	}
	c := st.f.CIE
	switch op >> 6 {
	case opAdvanceLoc:
		return st.advance(at, uint64(op&0x3f))
	case opOffset:
		return st.savedAt(r, at, uint64(op&0x3f), RuleOffset, "DW_CFA_offset.offset", false)
	case opRestore:
		return st.restore(at, uint64(op&0x3f))
	}
	switch op {
	case opNop:
		return nil
	case opSetLoc:
		if !st.inFDE {
			return formatErr(at, "DW_CFA_set_loc", "in a CIE's initial instructions")
		}
		enc := c.FDEEncoding
		if !c.augData {
			enc = PEAbsPtr
		}
		// The bases are those of the section; pc-relative set_loc
		// is not emitted by any producer and would need them here.
		if enc.application() != 0 {
			return unsupportedErr(at, "DW_CFA_set_loc", "relative address encoding %v", enc)
		}
		loc, err := r.pointerValue("DW_CFA_set_loc.address", enc.format(), c.AddrSize)
		if err != nil {
			return err
		}
		if loc < st.cur.Start {
			return formatErr(at, "DW_CFA_set_loc.address", "address %#x before the current row's %#x", loc, st.cur.Start)
		}
		return st.moveTo(at, loc)
	case opAdvanceLoc1, opAdvanceLoc2, opAdvanceLoc4:
		size := uint8(1) << (op - opAdvanceLoc1)
		d, err := r.uint("DW_CFA_advance_loc.delta", size)
		if err != nil {
			return err
		}
		return st.advance(at, d)
	case opOffsetExtended, opOffsetExtendedSF, opValOffset, opValOffsetSF, opGNUNegOffsetExtended:
		return st.offsetExtended(r, at, op)
	case opRestoreExtended:
		reg, err := r.uleb("DW_CFA_restore_extended.register")
		if err != nil {
			return err
		}
		return st.restore(at, reg)
	case opUndefined, opSameValue:
		reg, err := r.uleb("DW_CFA_undefined.register")
		if err != nil {
			return err
		}
		kind := RuleUndefined
		if op == opSameValue {
			kind = RuleSameValue
		}
		st.set(reg, Rule{Kind: kind})
		return nil
	case opRegister:
		reg, err := r.uleb("DW_CFA_register.register")
		if err != nil {
			return err
		}
		from, err := r.uleb("DW_CFA_register.register2")
		if err != nil {
			return err
		}
		st.set(reg, Rule{Kind: RuleRegister, Reg: from})
		return nil
	case opRememberState:
		if st.depth == MaxStateDepth {
			return formatErr(at, "DW_CFA_remember_state", "state stack deeper than %d", MaxStateDepth)
		}
		st.in.stack[st.depth] = st.cur
		st.depth++
		return nil
	case opRestoreState:
		if st.depth == 0 {
			return formatErr(at, "DW_CFA_restore_state", "no remembered state")
		}
		st.depth--
		start := st.cur.Start
		st.cur = st.in.stack[st.depth]
		st.cur.Start = start
		return nil
	case opDefCFA, opDefCFASF:
		return st.defCFA(r, at, op)
	case opDefCFARegister:
		reg, err := r.uleb("DW_CFA_def_cfa_register.register")
		if err != nil {
			return err
		}
		// As in libgcc: the offset is the last one defined, even
		// across an expression (hand-written assembly relies on it).
		st.cur.CFA.Kind, st.cur.CFA.Reg, st.cur.CFA.Expr = CFARegOffset, reg, nil
		return nil
	case opDefCFAOffset, opDefCFAOffsetSF:
		return st.defCFAOffset(r, at, op)
	case opDefCFAExpression:
		e, err := r.block("DW_CFA_def_cfa_expression.block")
		if err != nil {
			return err
		}
		st.cur.CFA.Kind, st.cur.CFA.Expr = CFAExpression, e
		return nil
	case opExpression, opValExpression:
		reg, err := r.uleb("DW_CFA_expression.register")
		if err != nil {
			return err
		}
		e, err := r.block("DW_CFA_expression.block")
		if err != nil {
			return err
		}
		kind := RuleExpression
		if op == opValExpression {
			kind = RuleValExpression
		}
		st.set(reg, Rule{Kind: kind, Expr: e})
		return nil
	case opNegateRAState:
		if !st.in.AArch64 {
			return unsupportedErr(at, "DW_CFA_GNU_window_save", "SPARC register windows")
		}
		st.cur.RAMangled = !st.cur.RAMangled
		return nil
	case opAArch64NegateRAWithPC:
		return unsupportedErr(at, "DW_CFA_AARCH64_negate_ra_state_with_pc", "PC-based return address signing")
	case opGNUArgsSize:
		n, err := r.uleb("DW_CFA_GNU_args_size.size")
		if err != nil {
			return err
		}
		st.cur.ArgsSize = n
		return nil
	}
	return unsupportedErr(at, "DW_CFA.opcode", "unknown opcode %#02x", op)
}

// advance moves the location by delta code alignment units.
func (st *run) advance(at, delta uint64) error {
	ca := st.f.CIE.CodeAlign
	if ca != 0 && delta > math.MaxUint64/ca {
		return formatErr(at, "DW_CFA_advance_loc.delta", "delta %d overflows", delta)
	}
	d := delta * ca
	if d > math.MaxUint64-st.cur.Start {
		return formatErr(at, "DW_CFA_advance_loc.delta", "delta %d overflows", delta)
	}
	return st.moveTo(at, st.cur.Start+d)
}

// moveTo ends the current row at loc and starts the next there.
func (st *run) moveTo(at, loc uint64) error {
	if loc >= st.f.End() {
		st.done = true
		return nil
	}
	if loc == st.cur.Start {
		return nil
	}
	if len(st.in.rows) == MaxRows {
		return formatErr(at, "DW_CFA_advance_loc", "more than %d rows", MaxRows)
	}
	st.in.rows = append(st.in.rows, st.cur)
	st.cur.Start = loc
	return nil
}

// set gives reg a rule if it is tracked.
func (st *run) set(reg uint64, rule Rule) {
	for i, t := range st.in.Track {
		if t == reg {
			st.cur.Regs[i] = rule
		}
	}
}

func (st *run) restore(at, reg uint64) error {
	if !st.inFDE {
		return formatErr(at, "DW_CFA_restore", "in a CIE's initial instructions")
	}
	for i, t := range st.in.Track {
		if t == reg {
			st.cur.Regs[i] = st.initial.Regs[i]
		}
	}
	return nil
}

// offset reads an operand offset: SLEB128 if signed, else ULEB128, and
// multiplied by the data alignment factor if factored.
func (st *run) offset(r *reader, at uint64, field string, signed, factored bool) (int64, error) {
	var v int64
	if signed {
		s, err := r.sleb(field)
		if err != nil {
			return 0, err
		}
		v = s
	} else {
		u, err := r.uleb(field)
		if err != nil {
			return 0, err
		}
		if u > math.MaxInt64 {
			return 0, formatErr(at, field, "offset %d overflows", u)
		}
		v = int64(u)
	}
	if !factored {
		return v, nil
	}
	daf := st.f.CIE.DataAlign
	p := v * daf
	if daf != 0 && (p/daf != v || (daf == -1 && v == math.MinInt64)) {
		return 0, formatErr(at, field, "offset %d times %d overflows", v, daf)
	}
	return p, nil
}

// savedAt gives reg the rule kind (RuleOffset or RuleValOffset) with a
// factored offset read from r.
func (st *run) savedAt(r *reader, at, reg uint64, kind RuleKind, field string, signed bool) error {
	off, err := st.offset(r, at, field, signed, true)
	if err != nil {
		return err
	}
	st.set(reg, Rule{Kind: kind, Offset: off})
	return nil
}

// offsetExtended runs the operations that save a register given by a
// ULEB128 operand at a factored offset.
func (st *run) offsetExtended(r *reader, at uint64, op uint8) error {
	const field = "DW_CFA_offset_extended.offset"
	reg, err := r.uleb("DW_CFA_offset_extended.register")
	if err != nil {
		return err
	}
	switch op {
	case opOffsetExtended:
		return st.savedAt(r, at, reg, RuleOffset, field, false)
	case opOffsetExtendedSF:
		return st.savedAt(r, at, reg, RuleOffset, field, true)
	case opValOffset:
		return st.savedAt(r, at, reg, RuleValOffset, field, false)
	case opValOffsetSF:
		return st.savedAt(r, at, reg, RuleValOffset, field, true)
	}
	// DW_CFA_GNU_negative_offset_extended: an unsigned offset, negated.
	off, err := st.offset(r, at, field, false, true)
	if err != nil {
		return err
	}
	st.set(reg, Rule{Kind: RuleOffset, Offset: -off})
	return nil
}

// defCFA runs DW_CFA_def_cfa (unfactored offset) and DW_CFA_def_cfa_sf.
func (st *run) defCFA(r *reader, at uint64, op uint8) error {
	reg, err := r.uleb("DW_CFA_def_cfa.register")
	if err != nil {
		return err
	}
	sf := op == opDefCFASF
	off, err := st.offset(r, at, "DW_CFA_def_cfa.offset", sf, sf)
	if err != nil {
		return err
	}
	st.cur.CFA = CFARule{Kind: CFARegOffset, Reg: reg, Offset: off}
	return nil
}

// defCFAOffset runs DW_CFA_def_cfa_offset (unfactored) and
// DW_CFA_def_cfa_offset_sf.
func (st *run) defCFAOffset(r *reader, at uint64, op uint8) error {
	// As in libgcc, the offset is kept for a later
	// DW_CFA_def_cfa_register when the CFA is not register-based.
	sf := op == opDefCFAOffsetSF
	off, err := st.offset(r, at, "DW_CFA_def_cfa_offset.offset", sf, sf)
	if err != nil {
		return err
	}
	st.cur.CFA.Offset = off
	return nil
}
