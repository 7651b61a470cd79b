package sframe

import (
	"encoding/binary"
	"fmt"
)

// Regs are the registers of the frame the unwinder starts from that it
// uses: the topmost frame's, or with Caller a caller's.
type Regs struct {
	PC, SP, FP uint64
	LR         uint64 // aarch64 x30, the topmost frame's; ignored on amd64
	// Caller: PC is a return address, as where an unwind resumes a walk
	// that ended below the topmost frame; the rule is the call's, at
	// PC - 1.
	Caller bool
}

// Memory reads the unwound process's memory.
type Memory interface {
	// ReadUint64 returns the 8-byte word at addr in the target's byte
	// order, or false if addr cannot be read.
	ReadUint64(addr uint64) (uint64, bool)
}

// Snapshot is a copy of stack memory: Data holds the bytes at Base and up.
type Snapshot struct {
	Base      uint64
	Data      []byte
	BigEndian bool
}

// ReadUint64 reads a word from the snapshot; anything outside it fails.
func (s *Snapshot) ReadUint64(addr uint64) (uint64, bool) {
	off := addr - s.Base
	if addr < s.Base || off > uint64(len(s.Data)) || uint64(len(s.Data))-off < 8 {
		return 0, false
	}
	if s.BigEndian {
		return binary.BigEndian.Uint64(s.Data[off:]), true
	}
	return binary.LittleEndian.Uint64(s.Data[off:]), true
}

// Mapping is what a Resolver knows about the code at a PC.
type Mapping struct {
	// Table is the SFrame table of the binary mapped there, or nil.
	Table *Table
	// Bias is added to a table address to get the runtime address
	// (the load address of a PIE, 0 for a fixed-address executable).
	Bias uint64
	// FramePointers says the code keeps frame pointers: where Table
	// has no rule for a PC, the frame-pointer rule is used.
	FramePointers bool
}

// Resolver finds the mapping of a runtime PC.
type Resolver interface {
	Resolve(pc uint64) (Mapping, bool)
}

// StopReason says why an unwind ended.
type StopReason uint8

// Reasons an unwind stops. Only StopOutermost means the stack was walked
// to its end; the others mean the frames found so far are all there is.
const (
	// StopOutermost: the outermost frame was reached (RA undefined, a
	// return address of 0, or a frame pointer of 0 where the
	// frame-pointer rule applies).
	StopOutermost StopReason = iota + 1
	// StopNoMapping: the resolver knows no mapping for the PC.
	StopNoMapping
	// StopNoRule: the PC's mapping has no SFrame rule for it (a gap or
	// a binary without a table) and does not keep frame pointers.
	StopNoRule
	// StopReadFault: a read outside the readable memory.
	StopReadFault
	// StopCFANotIncreasing: the next CFA is not above the stack
	// pointer, so the unwind would not progress (a loop or corruption).
	StopCFANotIncreasing
	// StopBadCFA: the CFA is misaligned, or FP-based with FP below SP.
	StopBadCFA
	// StopLinkRegister: a rule needs the link register (or another
	// register) outside the topmost frame, where it is not known.
	StopLinkRegister
	// StopSignalFrame: a signal trampoline, which SFrame cannot unwind.
	StopSignalFrame
	// StopFull: the output slice is full.
	StopFull
)

var stopNames = [...]string{
	StopOutermost:        "outermost frame",
	StopNoMapping:        "no mapping for PC",
	StopNoRule:           "no unwind rule for PC",
	StopReadFault:        "read outside memory",
	StopCFANotIncreasing: "CFA does not increase",
	StopBadCFA:           "bad CFA",
	StopLinkRegister:     "register unknown outside topmost frame",
	StopSignalFrame:      "signal frame",
	StopFull:             "output full",
}

func (r StopReason) String() string {
	if int(r) < len(stopNames) && stopNames[r] != "" {
		return stopNames[r]
	}
	return fmt.Sprintf("StopReason(%d)", uint8(r))
}

// DefaultPACMask clears the bits above a 48-bit user address, where an
// aarch64 pointer authentication code lives.
const DefaultPACMask = 0xffff_0000_0000_0000

// Unwinder walks user stacks with SFrame rules. Its zero value is not
// usable: set Arch and Resolver.
type Unwinder struct {
	Arch     Arch
	Resolver Resolver
	// PACMask is the set of bits to clear from a PAC-signed return
	// address (the kernel's NT_ARM_PAC_MASK); 0 means DefaultPACMask.
	PACMask uint64
}

// frame is the register state of one frame during an unwind.
type frame struct {
	pc, sp, fp, lr uint64
	top            bool
}

// Unwind writes the PCs of the stack whose topmost frame has registers
// regs into out, topmost first, and returns how many it wrote and why it
// stopped. The first PC is regs.PC; the others are return addresses.
// It allocates nothing.
func (u *Unwinder) Unwind(regs Regs, mem Memory, out []uint64) (int, StopReason) {
	fr := frame{pc: regs.PC, sp: regs.SP, fp: regs.FP, lr: regs.LR, top: !regs.Caller}
	for n := 0; ; n++ {
		if n == len(out) {
			return n, StopFull
		}
		out[n] = fr.pc
		if stop := u.step(&fr, mem); stop != 0 {
			return n + 1, stop
		}
	}
}

// step replaces fr by its caller's frame, or says why it cannot.
func (u *Unwinder) step(fr *frame, mem Memory) StopReason {
	// A return address points after the call; the call itself, and the
	// rule that applies at it, is one byte earlier. This matters when a
	// call to a noreturn function ends a function.
	pc := fr.pc
	if !fr.top {
		pc--
	}
	m, ok := u.Resolver.Resolve(pc)
	if !ok {
		return StopNoMapping
	}
	var (
		f *FDE
		r *Row
	)
	if m.Table != nil {
		var i int
		f, i = m.Table.find(pc - m.Bias)
		switch {
		case i >= 0:
			r = m.Table.rule(i)
		case f != nil && m.Table.outermostFDE(f):
			return StopOutermost
		}
	}
	if r == nil {
		if !m.FramePointers && (m.Table == nil || m.Table.Header.Flags&FlagFramePointer == 0) {
			return StopNoRule
		}
		return u.stepFP(fr, mem)
	}
	if f.Signal() {
		return StopSignalFrame
	}
	return u.apply(fr, r, mem)
}

// reg returns the value of DWARF register reg in fr, or false if the
// unwinder does not know it.
func (u *Unwinder) reg(fr *frame, reg uint8) (uint64, bool) {
	switch {
	case reg == u.Arch.RegSP():
		return fr.sp, true
	case reg == u.Arch.RegFP():
		return fr.fp, true
	case u.Arch == ArchARM64 && reg == arm64RegLR && fr.top:
		return fr.lr, true
	}
	return 0, false
}

// eval computes a rule's value: register- or CFA-relative, optionally
// read from memory.
func (u *Unwinder) eval(fr *frame, l Loc, cfa uint64, mem Memory) (uint64, StopReason) {
	base := cfa
	if l.Kind == LocReg {
		v, ok := u.reg(fr, l.Reg)
		if !ok {
			return 0, StopLinkRegister
		}
		base = v
	}
	addr := base + uint64(int64(l.Off))
	if !l.Deref {
		return addr, 0
	}
	v, ok := mem.ReadUint64(addr)
	if !ok {
		return 0, StopReadFault
	}
	return v, 0
}

func (u *Unwinder) apply(fr *frame, r *Row, mem Memory) StopReason {
	switch {
	case r.RA.Kind == LocUndefined:
		return StopOutermost
	case r.RA.Kind == LocSame && (u.Arch != ArchARM64 || !fr.top):
		// Still in the link register, which only the topmost frame
		// has: deeper, x30 was overwritten by the call.
		return StopLinkRegister
	}
	cfa, stop := u.eval(fr, r.CFA, 0, mem)
	if stop != 0 {
		return stop
	}
	if r.CFA.Reg == u.Arch.RegFP() && fr.fp < fr.sp {
		return StopBadCFA
	}
	if stop := checkCFA(fr, cfa); stop != 0 {
		return stop
	}
	var ra uint64
	switch r.RA.Kind {
	case LocSame:
		ra = fr.lr
	default:
		if ra, stop = u.eval(fr, r.RA, cfa, mem); stop != 0 {
			return stop
		}
	}
	fp := fr.fp
	if r.FP.Kind != LocSame {
		v, stop := u.eval(fr, r.FP, cfa, mem)
		switch {
		case stop == 0:
			fp = v
		case !popped(fr, r.FP, cfa):
			return stop
		}
	}
	if r.Mangled() {
		ra = u.stripPAC(ra)
	}
	return fr.set(cfa, ra, fp)
}

// popped says the saved register l names lies below SP: an epilogue has
// popped it back into its register already. Compilers rarely say so in
// their CFI (GCC's epilogues only move the CFA), so the rule still points
// at the dead slot, which a copy of the stack from SP does not hold; the
// register's value is then the caller's.
func popped(fr *frame, l Loc, cfa uint64) bool {
	return l.Kind == LocCFA && l.Deref && cfa+uint64(int64(l.Off)) < fr.sp
}

// stepFP unwinds a frame that keeps the frame pointer: on amd64 and
// aarch64 alike, FP points at the saved FP with the return address above
// it. The CFA is taken as FP+16, exact on amd64; an aarch64 frame record
// can sit below locals, so there the caller's SP is a lower bound and an
// SP-based rule in the caller may then stop the unwind. A frame pointer
// of 0 is the outermost frame: _start and Go's goroutine entry clear it
// so that frame-pointer walks end there, as the kernel's and the BPF
// program's do.
func (u *Unwinder) stepFP(fr *frame, mem Memory) StopReason {
	if fr.fp == 0 {
		return StopOutermost
	}
	if fr.fp < fr.sp || fr.fp%8 != 0 {
		return StopBadCFA
	}
	cfa := fr.fp + 16
	if stop := checkCFA(fr, cfa); stop != 0 {
		return stop
	}
	fp, ok1 := mem.ReadUint64(fr.fp)
	ra, ok2 := mem.ReadUint64(fr.fp + 8)
	if !ok1 || !ok2 {
		return StopReadFault
	}
	if u.Arch == ArchARM64 {
		ra = u.stripPAC(ra)
	}
	return fr.set(cfa, ra, fp)
}

// checkCFA applies the kernel's per-step checks: the CFA is 8-byte aligned
// and above SP (equal only in the topmost frame, an aarch64 leaf).
func checkCFA(fr *frame, cfa uint64) StopReason {
	switch {
	case cfa%8 != 0:
		return StopBadCFA
	case cfa < fr.sp, cfa == fr.sp && !fr.top:
		return StopCFANotIncreasing
	}
	return 0
}

func (u *Unwinder) stripPAC(ra uint64) uint64 {
	if u.PACMask == 0 {
		return ra &^ DefaultPACMask
	}
	return ra &^ u.PACMask
}

// set moves fr to the caller: its SP is the CFA, its PC the return address.
func (fr *frame) set(cfa, ra, fp uint64) StopReason {
	if ra == 0 {
		return StopOutermost
	}
	fr.pc, fr.sp, fr.fp, fr.lr, fr.top = ra, cfa, fp, 0, false
	return 0
}
