package symbolize

import (
	"slices"
	"sync/atomic"
)

// names holds a table's function names as the binary spells them and,
// filled on first use, as they are shown: demangling every name of a large
// C++ binary up front would cost seconds for names never looked up.
type names struct {
	raw    []string
	pretty []atomic.Pointer[string]
	style  Demangling
}

// finish sizes the demangled-name slots once raw is complete, if any
// name is mangled (C and the kernel's names are not).
func (n *names) finish() {
	if n.style != DemangleNone && slices.ContainsFunc(n.raw, mangled) {
		n.pretty = make([]atomic.Pointer[string], len(n.raw))
	}
}

// show returns the shown name of name i and the binary's spelling when it
// differs, "" otherwise.
func (n *names) show(i int) (function, system string) {
	raw := n.raw[i]
	if !mangled(raw) || n.style == DemangleNone {
		return raw, ""
	}
	p := n.pretty[i].Load()
	if p == nil {
		s := demangled(raw, n.style)
		p = &s
		n.pretty[i].Store(p)
	}
	if *p == raw {
		return raw, ""
	}
	return *p, raw
}

func (n *names) size() int64 {
	b := int64(len(n.raw))*16 + int64(len(n.pretty))*8
	for _, s := range n.raw {
		b += int64(len(s))
	}
	return b
}
