package exporters

import "github.com/sprof/sprof/stacks"

// locPart is the inline levels Frames[lo:hi] of a Location: all of them
// (lo 0, hi len(Frames)) but where stackParts splits one.
type locPart struct {
	loc    *stacks.Location
	lo, hi int
}

// whole reports whether the part is its whole Location.
func (p locPart) whole() bool { return p.lo == 0 && p.hi == len(p.loc.Frames) }

func isPython(l *stacks.Location) bool { return l.Mapping != nil && l.Mapping.Kind == stacks.Python }

// stackParts appends to dst the parts of stack (leaf first) in the order a
// viewer shows them, leaf first. Each Location is whole, but one: the
// interpreter's frame right under a run of Python frames (the
// _PyEval_EvalFrameDefault call that runs them, cpython.Splice) may have
// functions inlined into it at its address, which run on behalf of the
// innermost of those Python frames (an addition for the line being
// executed, a call being made): they go leafward of the run, the function
// itself stays rootward of it.
func stackParts(dst []locPart, stack []*stacks.Location) []locPart {
	for i := 0; i < len(stack); i++ {
		loc := stack[i]
		if !isPython(loc) || (i > 0 && isPython(stack[i-1])) {
			dst = append(dst, locPart{loc, 0, len(loc.Frames)})
			continue
		}
		end := i // the run of Python frames is stack[i:end]
		for end < len(stack) && isPython(stack[end]) {
			end++
		}
		var eval *stacks.Location
		if end < len(stack) && len(stack[end].Frames) > 1 {
			eval = stack[end]
			dst = append(dst, locPart{eval, 0, len(eval.Frames) - 1})
		}
		for _, l := range stack[i:end] {
			dst = append(dst, locPart{l, 0, len(l.Frames)})
		}
		if eval != nil {
			dst = append(dst, locPart{eval, len(eval.Frames) - 1, len(eval.Frames)})
			end++
		}
		i = end - 1
	}
	return dst
}
