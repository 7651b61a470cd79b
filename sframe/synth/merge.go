package synth

import (
	"slices"

	"github.com/sprof/sprof/sframe"
)

// FillGaps returns sf, a binary's .sframe table, with the functions of
// eh, synthesized from its .eh_frame, that sf does not cover: code that
// gas did not assemble with --gsframe, such as crt1's _start, whose CFI
// marks the outermost frame. If nothing is missing, or the merge fails, it
// is sf.
func FillGaps(sf, eh *sframe.Table) *sframe.Table {
	have := sf.FDEs()
	var extra []sframe.Function
	for i := range eh.FDEs() {
		f := &eh.FDEs()[i]
		j, _ := slices.BinarySearchFunc(have, f.Start, func(h sframe.FDE, pc uint64) int {
			if h.End() <= pc {
				return -1
			}
			return 1
		})
		if j < len(have) && have[j].Start < f.End() {
			continue // sf covers (part of) it
		}
		extra = append(extra, function(eh, f))
	}
	if len(extra) == 0 {
		return sf
	}
	funcs := make([]sframe.Function, 0, len(have)+len(extra))
	for i := range have {
		if have[i].Size > 0 {
			funcs = append(funcs, function(sf, &have[i]))
		}
	}
	t, err := sframe.NewTable(sf.Header.ABI, append(funcs, extra...))
	if err != nil {
		return sf
	}
	return t
}

// function turns an FDE of t back into the Function NewTable takes. V1
// PCMASK FDEs repeat every 16 bytes; a row at the function's end (binutils
// PR 33131) never matches and is left out.
func function(t *sframe.Table, f *sframe.FDE) sframe.Function {
	fn := sframe.Function{Start: f.Start, Size: f.Size, RepSize: f.RepSize, PACKeyB: f.PACKeyB(), Signal: f.Signal()}
	if f.PCMask() && fn.RepSize == 0 {
		fn.RepSize = 16
	}
	limit := fn.Size
	if fn.RepSize != 0 {
		limit = min(limit, uint32(fn.RepSize))
	}
	for _, r := range t.Rows(f) {
		if r.Start < limit {
			fn.Rows = append(fn.Rows, r)
		}
	}
	return fn
}
