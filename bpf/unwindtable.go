package bpf

import (
	"errors"
	"fmt"
	"math"

	"github.com/sprof/sprof/sframe"
)

// The layouts of sprof.bpf.c's table walk (struct unwind_rule, unwind_row,
// unwind_table, unwind_key, unwind_mapping), field for field.
type unwindRule struct {
	CFAOff int32
	RAOff  int16
	FPOff  int16
	Kind   uint8
	Flags  uint8
	_      uint16
}

type unwindRow struct {
	PC   uint32
	Rule uint32
}

type unwindTableSlot struct {
	PageBase uint32
	NPages   uint32
	Gen      uint32
	_        uint32
	Used     uint64
}

type unwindKey struct {
	PrefixLen uint32
	Pid       uint32 // big-endian
	PC        uint64 // big-endian
}

type unwindMapping struct {
	Start, End, Base uint64
	Table, Kind, Gen uint32
	_                uint32
}

// enum rule_kind, rule_flag and mapping_kind.
const (
	ruleGap = iota
	ruleCFASP
	ruleCFAFP
	ruleOutermost
	ruleUnsupported
)

const (
	ruleRASaved = 1 << iota
	ruleFPSaved
)

const (
	mappingTable = iota
	mappingFramePointers
	mappingProcess
	mappingJIT
)

// tablePageShift is TABLE_PAGE_SHIFT: the page index has an entry per
// 4 KiB of code.
const tablePageShift = 12

// Bounds of one UnwindTable: row offsets are 32 bits, and a PLT's
// repeated rows are expanded at most maxRepeats times.
const (
	maxTableSpan = 1 << 32
	maxRepeats   = 1 << 16
)

// UnwindTable is a binary's unwind rules in the layout the BPF walk reads:
// rows sorted by address, each an offset from the table's base and a rule
// index, 8 bytes; the distinct rules; and a page index giving, for each
// 4 KiB of code, the row that covers its first byte, so that a lookup
// searches only that page's rows (at most 13 halvings, which the verifier
// can check). Gaps between functions are rows of their own.
type UnwindTable struct {
	// Base is the address (in the binary's address space, as the SFrame
	// table's) that row offsets count from.
	Base  uint64
	rows  []unwindRow
	pages []uint32
	rules []unwindRule
	// Unsupported counts the rows whose rule the walk cannot apply
	// (signal trampolines, register rules other than sp and fp based
	// CFAs, offsets beyond 16 bits): the walk stops there.
	Unsupported int
}

// Rows returns the number of rows, gaps included.
func (t *UnwindTable) Rows() int { return len(t.rows) }

// Size returns the kernel memory the table takes in the BPF maps.
func (t *UnwindTable) Size() int64 {
	return int64(len(t.rows))*rowEntryBytes + int64(len(t.pages))*pageEntryBytes + int64(len(t.rules))*ruleEntryBytes
}

// NewUnwindTable converts an SFrame table (parsed or synthesized from
// .eh_frame) into the BPF walk's layout.
func NewUnwindTable(st *sframe.Table) (*UnwindTable, error) {
	fdes := st.FDEs()
	if len(fdes) == 0 {
		return nil, errors.New("unwind table: no functions")
	}
	// A row per SFrame row and at most one per function (a gap after it,
	// or a function without rows): growing the slice instead cost a third
	// of the conversion (BenchmarkNewUnwindTable).
	b := tableBuilder{t: &UnwindTable{Base: fdes[0].Start, rows: make([]unwindRow, 0, st.NumRows()+len(fdes))},
		ids: map[unwindRule]uint32{}, arch: st.Arch()}
	for i := range fdes {
		f := &fdes[i]
		if err := b.addFunction(st, f); err != nil {
			return nil, err
		}
		if i+1 == len(fdes) || fdes[i+1].Start > f.End() {
			if err := b.add(f.End(), unwindRule{Kind: ruleGap}); err != nil {
				return nil, err
			}
		}
	}
	b.index()
	return b.t, nil
}

type tableBuilder struct {
	t    *UnwindTable
	ids  map[unwindRule]uint32
	arch sframe.Arch
	rows []sframe.Row // the function's, reused
	// recent remembers rules' ids in front of ids, direct-mapped: a
	// binary has a few hundred rules, and the map's hashing was a third
	// of the conversion (BenchmarkNewUnwindTable).
	recent [256]struct {
		rule unwindRule
		id   uint32 // +1; 0 for an empty slot
	}
}

func (b *tableBuilder) addFunction(st *sframe.Table, f *sframe.FDE) error {
	b.rows = st.AppendRows(b.rows[:0], f)
	rows := b.rows
	if len(rows) == 0 {
		// A V3 function without rows is the outermost frame; otherwise
		// it is a gap.
		kind := uint8(ruleGap)
		if r, ok := st.Lookup(f.Start); ok && r.Row.Outermost() {
			kind = ruleOutermost
		}
		return b.add(f.Start, unwindRule{Kind: kind})
	}
	step, reps := uint64(f.Size), uint64(1)
	if f.PCMask() {
		if f.RepSize == 0 {
			return b.add(f.Start, unwindRule{Kind: ruleUnsupported})
		}
		step = uint64(f.RepSize)
		reps = min((uint64(f.Size)+step-1)/step, maxRepeats)
	}
	for k := range reps {
		// Before a function's (or a block's) first row there is none: a
		// gap, not the rule of the row before.
		if rows[0].Start > 0 {
			if err := b.add(f.Start+k*step, unwindRule{Kind: ruleGap}); err != nil {
				return err
			}
		}
		for i := range rows {
			if uint64(rows[i].Start) >= step {
				break
			}
			r := b.rule(&rows[i], f)
			if err := b.add(f.Start+k*step+uint64(rows[i].Start), r); err != nil {
				return err
			}
		}
	}
	// Blocks past maxRepeats have no rows of their own: the walk stops
	// there rather than apply the last block's last rule.
	if end := reps * step; end < uint64(f.Size) {
		b.t.Unsupported++
		return b.add(f.Start+end, unwindRule{Kind: ruleUnsupported})
	}
	return nil
}

// rule converts an SFrame row's rule.
func (b *tableBuilder) rule(r *sframe.Row, f *sframe.FDE) unwindRule {
	unsupported := unwindRule{Kind: ruleUnsupported}
	if r.Outermost() {
		return unwindRule{Kind: ruleOutermost}
	}
	if f.Signal() || r.CFA.Kind != sframe.LocReg || r.CFA.Deref {
		b.t.Unsupported++
		return unsupported
	}
	var out unwindRule
	switch r.CFA.Reg {
	case b.arch.RegSP():
		out.Kind = ruleCFASP
	case b.arch.RegFP():
		out.Kind = ruleCFAFP
	default:
		b.t.Unsupported++
		return unsupported
	}
	out.CFAOff = r.CFA.Off
	ok := true
	switch {
	case r.RA.Kind == sframe.LocCFA && r.RA.Deref:
		out.Flags |= ruleRASaved
		out.RAOff, ok = int16(r.RA.Off), r.RA.Off == int32(int16(r.RA.Off))
	case r.RA.Kind == sframe.LocSame && b.arch == sframe.ArchARM64:
	default:
		ok = false
	}
	switch {
	case !ok:
	case r.FP.Kind == sframe.LocCFA && r.FP.Deref:
		out.Flags |= ruleFPSaved
		out.FPOff, ok = int16(r.FP.Off), r.FP.Off == int32(int16(r.FP.Off))
	case r.FP.Kind != sframe.LocSame:
		ok = false
	}
	if !ok {
		b.t.Unsupported++
		return unsupported
	}
	return out
}

// add appends a row at address pc; a row at the address of the last one
// replaces it (a function starting where the gap after the previous one
// would), and one below it is dropped (overlapping functions: the first
// keeps its range).
func (b *tableBuilder) add(pc uint64, r unwindRule) error {
	off := pc - b.t.Base
	if pc < b.t.Base || off >= maxTableSpan {
		return fmt.Errorf("unwind table: function at %#x lies more than 4 GiB above the first (%#x)", pc, b.t.Base)
	}
	id, ok := uint32(0), false
	slot := &b.recent[uint8(uint32(r.CFAOff)*7^uint32(uint16(r.RAOff))*5^uint32(uint16(r.FPOff))*3^uint32(r.Kind)<<4^uint32(r.Flags))]
	if slot.id != 0 && slot.rule == r {
		id, ok = slot.id-1, true
	} else if id, ok = b.ids[r]; !ok {
		id = uint32(len(b.t.rules))
		b.t.rules = append(b.t.rules, r)
		b.ids[r] = id
	}
	slot.rule, slot.id = r, id+1
	rows := b.t.rows
	switch n := len(rows); {
	case n > 0 && uint64(rows[n-1].PC) == off:
		rows[n-1].Rule = id
	case n > 0 && uint64(rows[n-1].PC) > off:
	default:
		b.t.rows = append(rows, unwindRow{PC: uint32(off), Rule: id})
	}
	return nil
}

// index builds the page index: entry k is the last row at or below
// k << tablePageShift, one entry past the last row's page.
func (b *tableBuilder) index() {
	rows := b.t.rows
	last := uint64(rows[len(rows)-1].PC) >> tablePageShift
	pages := make([]uint32, last+2)
	i := 0
	for k := range pages {
		at := uint64(k) << tablePageShift
		for i+1 < len(rows) && uint64(rows[i+1].PC) <= at {
			i++
		}
		pages[k] = uint32(i)
	}
	b.t.pages = pages
}

// npages is the pages the index covers (its entries less one).
func (t *UnwindTable) npages() uint32 {
	if len(t.pages) > math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(len(t.pages) - 1)
}
