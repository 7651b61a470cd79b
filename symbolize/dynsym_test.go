package symbolize

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sprof/sprof/stacks"
)

// libz is a distribution library stripped to its .dynsym, with a
// .gnu_debuglink to a debug file this host does not have.
const libz = "/lib/x86_64-linux-gnu/libz.so.1"

// TestDynsymOnly symbolizes the first, middle and last byte of every
// function libz exports, from .dynsym alone, and checks the names against
// `nm -D`.
func TestDynsymOnly(t *testing.T) {
	needTool(t, "nm")
	needTool(t, "readelf")
	if !strings.Contains(run(t, "", "readelf", "-SW", libz), ".dynsym") || strings.Contains(run(t, "", "readelf", "-SW", libz), ".symtab") {
		t.Fatalf("%s is not stripped to its .dynsym; the test needs such a library", libz)
	}
	aliases := map[uint64][]string{}
	var syms []nmSym
	for _, line := range strings.Split(run(t, "", "nm", "-D", "-S", "--defined-only", "--without-symbol-versions", libz), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 || (f[2] != "T" && f[2] != "t") {
			continue
		}
		addr, err1 := strconv.ParseUint(f[0], 16, 64)
		size, err2 := strconv.ParseUint(f[1], 16, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("nm line %q", line)
		}
		aliases[addr] = append(aliases[addr], f[3])
		syms = append(syms, nmSym{addr: addr, size: size, raw: f[3], name: f[3]})
	}
	if len(syms) < 50 {
		t.Fatalf("nm -D lists %d functions in %s, want libz's 80 or more", len(syms), libz)
	}
	loads := readelfLoads(t, libz)
	// No debug directory holds libz's debug file: names come from .dynsym.
	s := NewELF(Options{DebugDirs: []string{t.TempDir()}})
	var frames []stacks.Frame
	ps := probes(syms, 0)
	for _, p := range ps {
		off, ok := fileOffset(loads, p.addr)
		if !ok {
			t.Fatalf("%#x (%s) is in no executable segment", p.addr, p.sym.name)
		}
		var err error
		if frames, err = s.Symbolize(frames[:0], Binary{Path: libz}, off); err != nil {
			t.Fatal(err)
		}
		if len(frames) != 1 || !slices.Contains(aliases[p.sym.addr], frames[0].Function) || frames[0].File != "" {
			t.Errorf("%#x in %s: frames %+v, want one named one of %q, without a file", p.addr, p.sym.name, frames, aliases[p.sym.addr])
		}
	}
	t.Logf("%d probes in %d exported functions named from .dynsym", len(ps), len(syms))
}
