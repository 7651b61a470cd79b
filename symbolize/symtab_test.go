package symbolize

import "testing"

func TestSymtabLookup(t *testing.T) {
	const secEnd = 0x1000
	fn := func(addr, size uint64, name string) symbol {
		return symbol{addr: addr, size: size, limit: secEnd, name: name, rank: rankFunc + rankGlobal}
	}
	syms := []symbol{
		fn(0x100, 0x40, "sized"),
		// Aliases: the global function wins over the local label, then
		// the weak one, then underscores, then length.
		{addr: 0x200, size: 0x20, limit: secEnd, name: "__libc_malloc", rank: rankFunc + rankGlobal},
		{addr: 0x200, size: 0x20, limit: secEnd, name: "malloc", rank: rankFunc + rankGlobal},
		{addr: 0x200, size: 0x20, limit: secEnd, name: "weak_malloc", rank: rankFunc + rankWeak},
		{addr: 0x200, limit: secEnd, name: "label_at_malloc", rank: rankLabel},
		// A zero-size function runs to the next symbol.
		fn(0x300, 0, "nosize"),
		// A sized function with a label and a nested sized symbol inside.
		fn(0x400, 0x100, "outer"),
		{addr: 0x420, limit: secEnd, name: "inner_label", rank: rankLabel + rankGlobal},
		fn(0x440, 0x10, "nested"),
		// A zero-size function inside a sized one ends with it.
		fn(0x480, 0, "entry_point"),
		// The last zero-size symbol runs to the end of its section.
		fn(0x800, 0, "tail"),
		// A size that overflows is cut at the section's end.
		{addr: 0x900, size: ^uint64(0), limit: 0x950, name: "huge", rank: rankFunc},
	}
	tab := newSymtab(syms, DemangleFull)
	tests := []struct {
		addr uint64
		want string
	}{
		{0x0ff, ""},
		{0x100, "sized"},
		{0x13f, "sized"},
		{0x140, ""}, // padding after a sized function
		{0x200, "malloc"},
		{0x21f, "malloc"},
		{0x220, ""},
		{0x300, "nosize"},
		{0x3ff, "nosize"},
		{0x400, "outer"},
		{0x425, "outer"}, // the untyped label does not hide its function
		{0x440, "nested"},
		{0x450, "outer"}, // past the nested symbol, back in the outer one
		{0x480, "entry_point"},
		{0x4ff, "entry_point"},
		{0x500, ""},
		{0x800, "tail"},
		{0x8ff, "tail"},
		{0x900, "huge"},
		{0x94f, "huge"},
		{0x950, ""},
		{0xfff, ""},
	}
	for _, tt := range tests {
		got := ""
		if i := tab.lookup(tt.addr); i >= 0 {
			got = tab.names.raw[i]
		}
		if got != tt.want {
			t.Errorf("lookup(%#x) = %q, want %q", tt.addr, got, tt.want)
		}
	}
}

func TestDemangling(t *testing.T) {
	syms := []symbol{
		{addr: 0x10, size: 8, limit: 0x100, name: "_ZN3foo3barIiEEvT_", rank: rankFunc},
		{addr: 0x20, size: 8, limit: 0x100, name: "_RNvCs1234_7mycrate4main", rank: rankFunc},
		{addr: 0x30, size: 8, limit: 0x100, name: "_ZN4core3fmt5write17h0123456789abcdefE", rank: rankFunc},
		{addr: 0x40, size: 8, limit: 0x100, name: "_Zoops", rank: rankFunc},
		{addr: 0x50, size: 8, limit: 0x100, name: "plain_c", rank: rankFunc},
		{addr: 0x60, size: 8, limit: 0x100, name: "_ZN5names13gr$uf6$$udf$e17h0123456789abcdefE", rank: rankFunc},
		{addr: 0x70, size: 8, limit: 0x100, name: "_ZN5names13a$u1f980$$uz$17h0123456789abcdefE", rank: rankFunc},
	}
	tests := []struct {
		addr uint64
		d    Demangling
		want string
	}{
		{0x10, DemangleFull, "void foo::bar<int>(int)"},
		{0x10, DemangleNoParams, "foo::bar<int>"},
		{0x10, DemangleNone, "_ZN3foo3barIiEEvT_"},
		{0x20, DemangleFull, "mycrate::main"},
		{0x30, DemangleFull, "core::fmt::write"},
		{0x40, DemangleFull, "_Zoops"},
		{0x50, DemangleFull, "plain_c"},
		{0x60, DemangleFull, "names::größe"},
		{0x70, DemangleFull, "names::a🦀$uz$"},
	}
	for _, tt := range tests {
		tab := newSymtab(append([]symbol(nil), syms...), tt.d)
		f := tab.frame(tab.lookup(tt.addr))
		if f.Function != tt.want {
			t.Errorf("%#x %v: %q, want %q", tt.addr, tt.d, f.Function, tt.want)
		}
		if raw := tab.names.raw[tab.lookup(tt.addr)]; (f.SystemName != "") != (raw != tt.want) {
			t.Errorf("%#x %v: SystemName %q for %q", tt.addr, tt.d, f.SystemName, f.Function)
		}
	}
}
