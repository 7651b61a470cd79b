package synth

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/sprof/sprof/sframe"
	"github.com/sprof/sprof/sframe/cfi"
)

// Reason says why a CFI row has no SFrame equivalent.
type Reason uint8

// Reasons a row is left out.
const (
	// ReasonCFAExpression: the CFA is a DWARF expression (other than
	// the amd64 PLT one).
	ReasonCFAExpression Reason = iota
	// ReasonCFARegister: the CFA is based on a register other than the
	// stack and frame pointers (stack realignment, DRAP).
	ReasonCFARegister
	// ReasonCFAUnset: no instruction defined the CFA.
	ReasonCFAUnset
	// ReasonRA: the return address is not where SFrame can say: not at
	// CFA-8 on amd64; in another register, or an expression.
	ReasonRA
	// ReasonFP: the frame pointer is in another register, an
	// expression, or undefined.
	ReasonFP
	// ReasonFPWithoutRA: aarch64 only: the frame pointer is saved while
	// the return address is still in the link register, which SFrame
	// rows cannot say (their FP word follows the RA word).
	ReasonFPWithoutRA
	// ReasonOffset: an offset does not fit SFrame's 32 bits.
	ReasonOffset
	// NumReasons is the number of reasons.
	NumReasons
)

var reasonNames = [NumReasons]string{
	ReasonCFAExpression: "CFA expression",
	ReasonCFARegister:   "CFA on another register",
	ReasonCFAUnset:      "CFA undefined",
	ReasonRA:            "RA not at a fixed place",
	ReasonFP:            "FP not at a CFA offset",
	ReasonFPWithoutRA:   "FP saved with RA in LR",
	ReasonOffset:        "offset beyond 32 bits",
}

func (r Reason) String() string {
	if r < NumReasons {
		return reasonNames[r]
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// maxErrors bounds Stats.Errors; Stats.BadFDEs counts them all.
const maxErrors = 64

// Stats says how much of the CFI the table covers.
type Stats struct {
	FDEs    int // FDEs interpreted
	BadFDEs int // FDEs (or CIEs) that could not be parsed or interpreted
	// DebugFrameFDEs are the FDEs taken from .debug_frame, for code
	// .eh_frame does not describe.
	DebugFrameFDEs int
	Rows           int // CFI rows
	// Unsupported counts the rows left out, by reason.
	Unsupported [NumReasons]int
	PLTs        int // PLT expressions turned into PCMASK FDEs
	// Overlapping counts the functions (an FDE, or the part of one
	// between unsupported rows) left out because their range overlaps
	// another's.
	Overlapping int
	// OutsideCode counts the FDEs left out because their range is not
	// inside an executable segment (FromELF only).
	OutsideCode int
	// Bytes is the code the FDEs cover; CoveredBytes the part of it the
	// table has rules for.
	Bytes, CoveredBytes uint64
	Functions           int // FDEs of the table
	TableRows           int // rows of the table
	// HdrChecked says .eh_frame_hdr's search table was found and agrees
	// with .eh_frame (a disagreement is in Errors).
	HdrChecked bool
	// Errors are the first errors met (bad FDEs, a bad .eh_frame_hdr).
	Errors []error
}

// UnsupportedRows returns the number of rows left out.
func (s *Stats) UnsupportedRows() int {
	n := 0
	for _, c := range s.Unsupported {
		n += c
	}
	return n
}

func (s *Stats) addError(err error) {
	if len(s.Errors) < maxErrors {
		s.Errors = append(s.Errors, err)
	}
}

// regs are the DWARF numbers of the registers SFrame rules name.
type regs struct {
	sp, fp, ra uint64
}

func archRegs(abi sframe.ABI) regs {
	if abi == sframe.ABIAMD64LE {
		return regs{sp: 7, fp: 6, ra: 16}
	}
	return regs{sp: 31, fp: 29, ra: 30}
}

// synthesizer converts FDEs of one binary.
type synthesizer struct {
	abi   sframe.ABI
	regs  regs
	in    cfi.Interpreter
	funcs []sframe.Function
	// rows holds the rows of the functions, in chunks of at least
	// rowChunk rows: each function's Rows is a full slice of a chunk,
	// and a full chunk is left as it is for a new one (the open
	// function's rows move along), so rows are not copied again and
	// again as one growing slice would, nor kept twice.
	rows  []sframe.Row
	stats Stats
}

func newSynthesizer(abi sframe.ABI) *synthesizer {
	s := &synthesizer{abi: abi, regs: archRegs(abi)}
	s.in.AArch64 = abi != sframe.ABIAMD64LE
	s.in.Track = []uint64{s.regs.fp, s.regs.ra}
	return s
}

// Synthesize builds an SFrame table for abi from parsed CFI sections. The
// first frame's FDEs take precedence: an FDE of a later one is used only
// if it overlaps none of the earlier ones (pass .eh_frame, then
// .debug_frame). Errors of the frames' entries are counted in Stats.
func Synthesize(abi sframe.ABI, frames ...*cfi.Frame) (*sframe.Table, Stats, error) {
	return synthesize(abi, nil, frames)
}

// synthesize is Synthesize keeping only the FDEs inside code (all if
// inCode is nil).
func synthesize(abi sframe.ABI, inCode func(start, end uint64) bool, frames []*cfi.Frame) (*sframe.Table, Stats, error) {
	s := newSynthesizer(abi)
	n := 0
	for _, fr := range frames {
		n += len(fr.FDEs)
	}
	s.funcs = make([]sframe.Function, 0, n) // mostly one function an FDE
	var taken []span
	for i, fr := range frames {
		for _, err := range fr.Errors {
			s.stats.BadFDEs++
			s.stats.addError(err)
		}
		prev := taken
		for j := range fr.FDEs {
			f := &fr.FDEs[j]
			if i > 0 {
				if overlapsAny(prev, f.Start, f.End()) {
					continue
				}
				s.stats.DebugFrameFDEs++
			}
			taken = append(taken, span{f.Start, f.End()})
			if inCode != nil && f.Size > 0 && !inCode(f.Start, f.End()) {
				s.stats.OutsideCode++
				continue
			}
			s.fde(f)
		}
		slices.SortFunc(taken, func(a, b span) int { return cmp.Compare(a.start, b.start) })
	}
	s.funcs = dropOverlaps(s.funcs, &s.stats)
	t, err := sframe.NewTable(abi, s.funcs)
	if err != nil {
		return nil, s.stats, err
	}
	s.stats.Functions = len(t.FDEs())
	s.stats.TableRows = t.NumRows()
	return t, s.stats, nil
}

type span struct{ start, end uint64 }

// overlapsAny says [start, end) overlaps a span of the sorted spans.
func overlapsAny(spans []span, start, end uint64) bool {
	i, _ := slices.BinarySearchFunc(spans, start, func(s span, v uint64) int { return cmp.Compare(s.start, v) })
	return (i < len(spans) && spans[i].start < end) || (i > 0 && spans[i-1].end > start)
}

// dropOverlaps removes the functions whose ranges overlap another's:
// which of the two describes the code cannot be known.
func dropOverlaps(funcs []sframe.Function, st *Stats) []sframe.Function {
	slices.SortStableFunc(funcs, func(a, b sframe.Function) int { return cmp.Compare(a.Start, b.Start) })
	bad := make([]bool, len(funcs))
	var maxEnd uint64
	maxAt := -1
	for i := range funcs {
		if maxAt >= 0 && funcs[i].Start < maxEnd {
			bad[i], bad[maxAt] = true, true
		}
		if e := funcs[i].Start + uint64(funcs[i].Size); e > maxEnd {
			maxEnd, maxAt = e, i
		}
	}
	kept := funcs[:0]
	for i, f := range funcs {
		if bad[i] {
			st.Overlapping++
			st.CoveredBytes -= uint64(f.Size)
			continue
		}
		kept = append(kept, f)
	}
	return kept
}

// fde converts one FDE into functions.
func (s *synthesizer) fde(f *cfi.FDE) {
	s.stats.FDEs++
	if f.Size == 0 {
		return
	}
	if f.Size > math.MaxUint32 {
		s.stats.BadFDEs++
		s.stats.addError(fmt.Errorf("synth: FDE at %#x covers %d bytes, more than SFrame can", f.Offset, f.Size))
		return
	}
	s.stats.Bytes += f.Size
	rows, err := s.in.Rows(f)
	if err != nil {
		s.badFDE(f, err)
		return
	}
	s.stats.Rows += len(rows)
	if f.CIE.RAReg != s.regs.ra {
		// The return address is in a column SFrame has no word for.
		s.stats.Unsupported[ReasonRA] += len(rows)
		return
	}
	b := builder{s: s, fde: f}
	for i := range rows {
		end := f.End()
		if i+1 < len(rows) {
			end = rows[i+1].Start
		}
		b.row(&rows[i], end)
	}
	b.close(f.End())
}

func (s *synthesizer) badFDE(f *cfi.FDE, err error) {
	s.stats.BadFDEs++
	s.stats.addError(fmt.Errorf("synth: FDE at %#x for [%#x, %#x): %w", f.Offset, f.Start, f.End(), err))
}

// builder groups the supported rows of one FDE into functions.
type builder struct {
	s   *synthesizer
	fde *cfi.FDE
	// cur is the function being built, if open; its rows are
	// s.rows[first:].
	cur   sframe.Function
	open  bool
	first int
}

// row adds the CFI row r, which applies up to end.
func (b *builder) row(r *cfi.Row, end uint64) {
	s := b.s
	if plt, ok := s.pltFunction(r, end); ok {
		b.close(r.Start)
		s.stats.PLTs++
		s.add(plt)
		return
	}
	sr, reason, ok := s.convert(r)
	if !ok {
		s.stats.Unsupported[reason]++
		b.close(r.Start)
		return
	}
	if !b.open {
		b.cur = sframe.Function{Start: r.Start, PACKeyB: b.fde.CIE.PACKeyB, Signal: b.fde.CIE.SignalFrame}
		b.open, b.first = true, len(s.rows)
	}
	sr.Start = uint32(r.Start - b.cur.Start)
	if n := len(s.rows); n > b.first && sameRule(&s.rows[n-1], &sr) {
		return
	}
	if len(s.rows) == cap(s.rows) {
		moving := s.rows[b.first:]
		s.rows = append(make([]sframe.Row, 0, max(rowChunk, 2*len(moving))), moving...)
		b.first = 0
	}
	s.rows = append(s.rows, sr)
}

// rowChunk is the size of a chunk of synthesizer.rows: 1.2 MiB.
const rowChunk = 32 << 10

// close ends the function being built at end.
func (b *builder) close(end uint64) {
	if !b.open {
		return
	}
	rows := b.s.rows
	b.cur.Size = uint32(end - b.cur.Start)
	b.cur.Rows = rows[b.first:len(rows):len(rows)]
	b.s.add(b.cur)
	b.open = false
}

func (s *synthesizer) add(f sframe.Function) {
	s.funcs = append(s.funcs, f)
	s.stats.CoveredBytes += uint64(f.Size)
}

func sameRule(a, b *sframe.Row) bool {
	return a.CFA == b.CFA && a.RA == b.RA && a.FP == b.FP && a.Info&0x80 == b.Info&0x80
}

// convert turns a CFI row into an SFrame row, or says why it cannot.
func (s *synthesizer) convert(r *cfi.Row) (sframe.Row, Reason, bool) {
	var out sframe.Row
	fp, ra := r.Regs[0], r.Regs[1]
	if ra.Kind == cfi.RuleUndefined {
		out.RA = sframe.Loc{Kind: sframe.LocUndefined}
		out.CFA = sframe.Loc{Kind: sframe.LocUndefined}
		return out, 0, true
	}
	switch r.CFA.Kind {
	case cfi.CFAUnset:
		return out, ReasonCFAUnset, false
	case cfi.CFAExpression:
		return out, ReasonCFAExpression, false
	}
	if r.CFA.Reg != s.regs.sp && r.CFA.Reg != s.regs.fp {
		return out, ReasonCFARegister, false
	}
	off, ok := fits32(r.CFA.Offset)
	if !ok {
		return out, ReasonOffset, false
	}
	out.CFA = sframe.Loc{Kind: sframe.LocReg, Reg: uint8(r.CFA.Reg), Off: off}
	var reason Reason
	if out.RA, reason, ok = s.raLoc(ra); !ok {
		return out, reason, false
	}
	switch fp.Kind {
	case cfi.RuleUnspecified, cfi.RuleSameValue:
		out.FP = sframe.Loc{Kind: sframe.LocSame}
	case cfi.RuleOffset:
		off, ok := fits32(fp.Offset)
		if !ok {
			return out, ReasonOffset, false
		}
		if out.RA.Kind == sframe.LocSame {
			return out, ReasonFPWithoutRA, false
		}
		out.FP = sframe.Loc{Kind: sframe.LocCFA, Deref: true, Off: off}
	default:
		return out, ReasonFP, false
	}
	if r.RAMangled && s.abi != sframe.ABIAMD64LE {
		out.Info = 0x80
	}
	return out, 0, true
}

// raLoc converts the return address rule.
func (s *synthesizer) raLoc(ra cfi.Rule) (sframe.Loc, Reason, bool) {
	switch ra.Kind {
	case cfi.RuleOffset:
		off, ok := fits32(ra.Offset)
		if !ok {
			return sframe.Loc{}, ReasonOffset, false
		}
		if s.abi == sframe.ABIAMD64LE && off != -8 {
			return sframe.Loc{}, ReasonRA, false
		}
		return sframe.Loc{Kind: sframe.LocCFA, Deref: true, Off: off}, 0, true
	case cfi.RuleUnspecified, cfi.RuleSameValue:
		if s.abi != sframe.ABIAMD64LE {
			return sframe.Loc{Kind: sframe.LocSame}, 0, true
		}
	}
	return sframe.Loc{}, ReasonRA, false
}

func fits32(v int64) (int32, bool) {
	if v < math.MinInt32 || v > math.MaxInt32 {
		return 0, false
	}
	return int32(v), true
}

// WriteText writes the statistics for people, a few lines.
func (s *Stats) WriteText(w io.Writer) error {
	pct := 0.0
	if s.Bytes > 0 {
		pct = 100 * float64(s.CoveredBytes) / float64(s.Bytes)
	}
	hdr := "not checked (no search table)"
	if s.HdrChecked {
		hdr = "agrees with .eh_frame"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "FDEs: %d (%d from .debug_frame), bad: %d; CFI rows: %d\n", s.FDEs, s.DebugFrameFDEs, s.BadFDEs, s.Rows)
	fmt.Fprintf(&b, "rows left out: %d", s.UnsupportedRows())
	for r, n := range s.Unsupported {
		if n > 0 {
			fmt.Fprintf(&b, "; %s: %d", Reason(r), n)
		}
	}
	fmt.Fprintf(&b, "\nPLT expressions: %d; FDEs left out: %d overlapping, %d outside code\n", s.PLTs, s.Overlapping, s.OutsideCode)
	fmt.Fprintf(&b, "code covered: %d of %d bytes (%.2f%%)\n", s.CoveredBytes, s.Bytes, pct)
	fmt.Fprintf(&b, "table: %d functions, %d rows; .eh_frame_hdr: %s\n", s.Functions, s.TableRows, hdr)
	for _, err := range s.Errors {
		fmt.Fprintf(&b, "error: %v\n", err)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
