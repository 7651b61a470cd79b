package symbolize

import (
	"slices"
	"sort"
	"strings"

	"github.com/sprof/sprof/stacks"
)

// symbol is one candidate name for a range of code, from an ELF symbol
// table or from /proc/kallsyms.
type symbol struct {
	addr, size uint64
	// limit bounds a zero-size symbol: the end of its section.
	limit uint64
	name  string
	// module is the kernel module of a kallsyms symbol, "" otherwise.
	module string
	// rank orders symbols at the same address; the higher one names it.
	rank int
	// boundary symbols name nothing; they only end the symbol before them
	// (kallsyms data symbols and end-of-text markers).
	boundary bool
}

// Ranks for symbols at one address, highest first: a function over an
// indirect-function resolver over an untyped label; then global over weak
// over local.
const (
	rankFunc  = 3 << 2
	rankIFunc = 2 << 2
	rankLabel = 1 << 2

	rankGlobal = 2
	rankWeak   = 1
)

// symtab is the sorted, immutable address table of one binary (or of the
// kernel). A lookup is a binary search for the nearest symbol at or below
// the address, then a walk out through the symbols that enclose it, so a
// nested or zero-size symbol never hides the sized function around it.
type symtab struct {
	start  []uint64
	end    []uint64
	parent []int32 // index of the enclosing sized symbol, -1 for none
	names  names
	// moduleOf indexes modules, the kallsyms modules' names, once each
	// (modules[0] is ""); it is nil unless some symbol has a module.
	moduleOf []uint32
	modules  []string
	bytes    int64
}

// better reports whether a should name an address rather than b.
func better(a, b *symbol) bool {
	if a.boundary != b.boundary {
		return !a.boundary
	}
	if a.rank != b.rank {
		return a.rank > b.rank
	}
	if (a.size > 0) != (b.size > 0) {
		return a.size > 0
	}
	// Among aliases, the public spelling: malloc rather than __libc_malloc.
	ua, ub := leadingUnderscores(a.name), leadingUnderscores(b.name)
	if ua != ub {
		return ua < ub
	}
	if len(a.name) != len(b.name) {
		return len(a.name) < len(b.name)
	}
	return a.name < b.name
}

func leadingUnderscores(s string) int {
	return len(s) - len(strings.TrimLeft(s, "_"))
}

// newSymtab builds the table from syms, which it reorders; names are
// shown demangled as d says.
func newSymtab(syms []symbol, d Demangling) *symtab {
	slices.SortFunc(syms, func(a, b symbol) int {
		if a.addr != b.addr {
			if a.addr < b.addr {
				return -1
			}
			return 1
		}
		if better(&a, &b) {
			return -1
		}
		if better(&b, &a) {
			return 1
		}
		return 0
	})
	// One entry per address: the best name, the largest size of its aliases.
	uniq := syms[:0]
	for _, s := range syms {
		if n := len(uniq); n > 0 && uniq[n-1].addr == s.addr {
			uniq[n-1].size = max(uniq[n-1].size, s.size)
			continue
		}
		uniq = append(uniq, s)
	}
	syms = uniq

	t := &symtab{
		start:  make([]uint64, 0, len(syms)),
		end:    make([]uint64, 0, len(syms)),
		parent: make([]int32, 0, len(syms)),
		names:  names{raw: make([]string, 0, len(syms)), style: d},
	}
	var open []int32             // sized symbols that may still enclose the next one
	var module map[string]uint32 // index of each name in t.modules
	for i := range syms {
		s := &syms[i]
		for len(open) > 0 && t.end[open[len(open)-1]] <= s.addr {
			open = open[:len(open)-1]
		}
		parent := int32(-1)
		if len(open) > 0 {
			parent = open[len(open)-1]
		}
		// An untyped zero-size label inside a sized function is a jump
		// target of hand-written assembly, not a function of its own.
		if s.size == 0 && parent >= 0 && s.rank < rankIFunc && !s.boundary {
			continue
		}
		var end uint64
		if s.size > 0 {
			end = s.addr + s.size
			if end < s.addr || (s.limit > s.addr && end > s.limit) {
				end = max(s.limit, s.addr) // overflowing or past its section
			}
		} else {
			end = s.limit
			if i+1 < len(syms) {
				end = min(end, syms[i+1].addr)
			}
			if parent >= 0 {
				end = min(end, t.end[parent])
			}
			end = max(end, s.addr)
		}
		name := s.name
		if s.boundary {
			name = ""
		}
		idx := int32(len(t.start))
		t.start = append(t.start, s.addr)
		t.end = append(t.end, end)
		t.parent = append(t.parent, parent)
		t.names.raw = append(t.names.raw, name)
		if s.module != "" && t.moduleOf == nil {
			t.moduleOf = make([]uint32, idx, cap(t.start))
			t.modules = []string{""}
			module = map[string]uint32{"": 0}
		}
		if t.moduleOf != nil {
			m, ok := module[s.module]
			if !ok {
				m = uint32(len(t.modules))
				t.modules = append(t.modules, strings.Clone(s.module))
				module[t.modules[m]] = m
				t.bytes += int64(len(s.module)) + 16
			}
			t.moduleOf = append(t.moduleOf, m)
		}
		if s.size > 0 && !s.boundary {
			open = append(open, idx)
		}
	}
	t.names.finish()
	t.bytes += int64(len(t.start))*(8+8+4) + t.names.size()
	t.bytes += int64(len(t.moduleOf)) * 4
	return t
}

// lookup returns the index of the symbol that covers addr, or -1.
func (t *symtab) lookup(addr uint64) int {
	i := sort.Search(len(t.start), func(i int) bool { return t.start[i] > addr }) - 1
	for i >= 0 && addr >= t.end[i] {
		i = int(t.parent[i])
	}
	if i >= 0 && t.names.raw[i] == "" {
		return -1
	}
	return i
}

// frame returns the frame of symbol i.
func (t *symtab) frame(i int) stacks.Frame {
	var f stacks.Frame
	f.Function, f.SystemName = t.names.show(i)
	if t.moduleOf != nil && t.moduleOf[i] != 0 {
		f.File = "[" + t.modules[t.moduleOf[i]] + "]"
	}
	return f
}
