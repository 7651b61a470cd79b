package symbolize

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sprof/sprof/stacks"
)

// probe is an address chosen inside a known symbol.
type probe struct {
	addr uint64
	sym  nmSym
}

// probes picks the first, middle and last byte of every sized code symbol
// and the first byte of every zero-size one.
func probes(syms []nmSym) []probe {
	var ps []probe
	seen := map[uint64]bool{}
	for _, s := range syms {
		addrs := []uint64{s.addr}
		if s.size > 1 {
			addrs = append(addrs, s.addr+s.size/2, s.addr+s.size-1)
		}
		for _, a := range addrs {
			if !seen[a] {
				seen[a] = true
				ps = append(ps, probe{a, s})
			}
		}
	}
	return ps
}

// oracleCase is a binary we symbolize and the file with full symbols and
// DWARF that binutils reads for the expected answers.
type oracleCase struct {
	name, bin, oracle string
	debugDirs         []string
	// lines is whether DWARF lines must be found.
	lines bool
}

// TestAgainstBinutils symbolizes every code symbol's first, middle and
// last byte and checks function names against nm (every alias at the
// symbol's address is a right answer) and addr2line, and file and line
// against addr2line's innermost frame.
func TestAgainstBinutils(t *testing.T) {
	for _, tool := range []string{"readelf", "nm", "c++filt", "addr2line", llvmAddr2line} {
		needTool(t, tool)
	}
	none := []string{t.TempDir()}
	cases := []oracleCase{
		{"symbols and DWARF", fixture("c-O2"), fixture("c-O2"), none, true},
		{"debug file by build ID", fixture("c-stripped"), fixture("c-O2"), []string{fixture("debug")}, true},
		{"debug file by debuglink", fixture("c-debuglink"), fixture(".debug/c-debuglink.debug"), none, true},
		{"MiniDebugInfo", fixture("c-minidebug"), fixture("c-minidebug.full"), none, false},
		{"C++", fixture("cpp-O2"), fixture("cpp-O2"), none, true},
	}
	if id := libcDebug(); id != "" {
		cases = append(cases, oracleCase{"libc with libc6-dbg", libc, id, nil, true})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { checkAgainstBinutils(t, c) })
	}
}

const llvmAddr2line = "llvm-addr2line-22"

const libc = "/lib/x86_64-linux-gnu/libc.so.6"

// libcDebug returns the path of libc's debug file from libc6-dbg, "" when
// it is not installed.
func libcDebug() string {
	id, err := buildIDOf(libc)
	if err != nil {
		return ""
	}
	p := filepath.Join("/usr/lib/debug/.build-id", id[:2], id[2:]+".debug")
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

func checkAgainstBinutils(t *testing.T, c oracleCase) {
	syms := nmCode(t, c.oracle)
	aliases := map[uint64][]string{}
	for _, s := range syms {
		aliases[s.addr] = append(aliases[s.addr], s.name)
	}
	ps := probes(syms)
	loads := readelfLoads(t, c.bin)
	var addrs []uint64
	for _, p := range ps {
		addrs = append(addrs, p.addr)
	}
	// Names from binutils; lines from LLVM, whose DWARF 5 file tables
	// binutils 2.40 sometimes misreads (strfromd.c for strfrom-skeleton.c).
	a2l := addr2line(t, "addr2line", c.oracle, addrs)
	llvm := addr2line(t, llvmAddr2line, c.oracle, addrs)

	s := NewELF(Options{DebugDirs: c.debugDirs})
	var names, a2lNames, a2lChecked, lines, lineChecked, demangled int
	var frames []stacks.Frame
	for _, p := range ps {
		off, ok := fileOffset(loads, p.addr)
		if !ok {
			t.Logf("%#x (%s) is in no executable segment", p.addr, p.sym.name)
			continue
		}
		var err error
		frames, err = s.Symbolize(frames[:0], Binary{Path: c.bin}, off)
		if err != nil {
			t.Fatalf("%#x: %v", p.addr, err)
		}
		if len(frames) == 0 {
			t.Errorf("%#x (in %s): no frames", p.addr, p.sym.name)
			continue
		}
		got := frames[len(frames)-1]
		if !slices.Contains(aliases[p.sym.addr], got.Function) {
			t.Errorf("%#x: function %q, nm says one of %q", p.addr, got.Function, aliases[p.sym.addr])
			continue
		}
		names++
		if got.SystemName != "" {
			demangled++
			if got.SystemName == got.Function || !mangled(got.SystemName) {
				t.Errorf("%#x: SystemName %q for %q", p.addr, got.SystemName, got.Function)
			}
		}
		want := a2l[p.addr]
		if len(want) == 0 || want[0].function == "??" {
			continue
		}
		a2lChecked++
		outer := baseName(want[len(want)-1].function)
		if slices.ContainsFunc(aliases[p.sym.addr], func(n string) bool { return baseName(n) == outer }) {
			a2lNames++
		} else {
			t.Logf("%#x: function %q, addr2line says %q", p.addr, got.Function, want[len(want)-1].function)
		}
		want = llvm[p.addr]
		if !c.lines || len(want) == 0 || want[0].line == 0 {
			continue
		}
		lineChecked++
		inner := frames[0]
		// Paths are compared cleaned: tools join relative directories
		// differently (./stdlib/x.c, stdlib/x.c).
		if filepath.Clean(inner.File) == filepath.Clean(want[0].file) && inner.Line == want[0].line {
			lines++
		} else {
			t.Logf("%#x: %s:%d, llvm-addr2line says %s:%d", p.addr, inner.File, inner.Line, want[0].file, want[0].line)
		}
	}
	t.Logf("%d probes: %d names match nm, %d/%d match addr2line, lines %d/%d match llvm-addr2line, %d demangled",
		len(ps), names, a2lNames, a2lChecked, lines, lineChecked, demangled)
	if names == 0 || names < len(ps)*99/100 {
		t.Errorf("only %d of %d probes named", names, len(ps))
	}
	if a2lNames < a2lChecked {
		t.Errorf("%d of %d names differ from addr2line", a2lChecked-a2lNames, a2lChecked)
	}
	if c.lines && (lineChecked == 0 || lines < lineChecked*99/100) {
		t.Errorf("only %d of %d lines match llvm-addr2line", lines, lineChecked)
	}
	if st := s.CacheStats(); st.Misses != 1 {
		t.Errorf("the binary was loaded %d times, want once", st.Misses)
	}
	_ = fmt.Sprint
}
