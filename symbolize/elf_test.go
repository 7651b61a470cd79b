package symbolize

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sprof/sprof/internal/testenv"
	"github.com/sprof/sprof/stacks"
)

// probe is an address chosen inside a known symbol.
type probe struct {
	addr uint64
	sym  nmSym
}

// probes picks the first, middle and last byte of every sized code symbol
// — and every step-th byte, if step is not 0 — and the first byte of every
// zero-size one.
func probes(syms []nmSym, step uint64) []probe {
	var ps []probe
	seen := map[uint64]bool{}
	for _, s := range syms {
		addrs := []uint64{s.addr}
		if s.size > 1 {
			addrs = append(addrs, s.addr+s.size/2, s.addr+s.size-1)
		}
		for a := s.addr; step > 0 && a < s.addr+s.size; a += step {
			addrs = append(addrs, a)
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
	// step, if not 0, adds a probe every step bytes.
	step uint64
	// binutils prefixes the name of the binutils tools for another
	// architecture, "aarch64-linux-gnu-" (the host's generic ELF support
	// calls functions by their $x mapping symbols).
	binutils string
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
		{"symbols and DWARF", fixture("c-O2"), fixture("c-O2"), none, true, 3, ""},
		{"debug file by build ID", fixture("c-stripped"), fixture("c-O2"), []string{fixture("debug")}, true, 3, ""},
		{"debug file by debuglink", fixture("c-debuglink"), fixture(".debug/c-debuglink.debug"), none, true, 3, ""},
		{"MiniDebugInfo", fixture("c-minidebug"), fixture("c-minidebug.full"), none, false, 3, ""},
		{"C++", fixture("cpp-O2"), fixture("cpp-O2"), none, true, 3, ""},
		{"aarch64", fixture("c-O2-arm64"), fixture("c-O2-arm64"), none, true, 4, "aarch64-linux-gnu-"},
	}
	if id := libcDebug(); id != "" {
		cases = append(cases, oracleCase{"libc with libc6-dbg", libc, id, nil, true, 0, ""})
	} else if testenv.InCI() {
		t.Error("CI=true but libc's debug file is not under /usr/lib/debug/.build-id (make test installs libc6-dbg)")
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
	needTool(t, c.binutils+"addr2line")
	syms := nmCode(t, c.oracle)
	aliases := map[uint64][]string{}
	for _, s := range syms {
		aliases[s.addr] = append(aliases[s.addr], s.name)
	}
	ps := probes(syms, c.step)
	loads := readelfLoads(t, c.bin)
	var addrs []uint64
	for _, p := range ps {
		addrs = append(addrs, p.addr)
	}
	// Names from binutils; lines from LLVM, whose DWARF 5 file tables
	// binutils 2.40 sometimes misreads (strfromd.c for strfrom-skeleton.c).
	a2l := addr2line(t, c.binutils+"addr2line", c.oracle, addrs)
	llvm := addr2line(t, llvmAddr2line, c.oracle, addrs)

	s := NewELF(Options{DebugDirs: c.debugDirs})
	var names, a2lNames, a2lChecked, lines, lineChecked, demangled, inlined int
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
		pos := llvm[p.addr]
		if !c.lines || len(pos) == 0 || pos[0].line == 0 {
			continue
		}
		lineChecked++
		if sameInlineStack(frames, want, pos) {
			lines++
		} else {
			t.Logf("%#x: %s, addr2line says %s, llvm-addr2line %s", p.addr, fmtFrames(frames), fmtA2L(want), fmtA2L(pos))
		}
		if len(pos) > 1 {
			inlined++
		}
	}
	t.Logf("%d probes: %d names match nm, %d/%d match addr2line, inline stacks %d/%d match llvm-addr2line (%d with inlined calls), %d demangled",
		len(ps), names, a2lNames, a2lChecked, lines, lineChecked, inlined, demangled)
	if names == 0 || names < len(ps)*99/100 {
		t.Errorf("only %d of %d probes named", names, len(ps))
	}
	if a2lNames < a2lChecked {
		t.Errorf("%d of %d names differ from addr2line", a2lChecked-a2lNames, a2lChecked)
	}
	if c.lines && (lineChecked == 0 || lines < lineChecked) {
		t.Errorf("only %d of %d inline stacks match llvm-addr2line", lines, lineChecked)
	}
	if st := s.CacheStats(); st.Misses != 1 {
		t.Errorf("the binary was loaded %d times, want once", st.Misses)
	}
}

// sameInlineStack compares our frames with the oracles' level by level:
// inlined names with binutils' (whose demangler spells names as ours
// does; the outermost, a symbol, is checked against its aliases apart),
// files and lines with LLVM's (files cleaned: tools join relative
// directories differently, ./stdlib/x.c and stdlib/x.c).
func sameInlineStack(got []stacks.Frame, names, pos []a2lFrame) bool {
	if len(got) != len(names) || len(got) != len(pos) {
		return false
	}
	for i, g := range got {
		if i < len(got)-1 && g.Function != names[i].function {
			return false
		}
		if filepath.Clean(g.File) != filepath.Clean(pos[i].file) || g.Line != pos[i].line {
			return false
		}
	}
	return true
}

func fmtFrames(fs []stacks.Frame) string {
	var s []string
	for _, f := range fs {
		s = append(s, fmt.Sprintf("%s@%s:%d", f.Function, f.File, f.Line))
	}
	return strings.Join(s, " < ")
}

func fmtA2L(fs []a2lFrame) string {
	var s []string
	for _, f := range fs {
		s = append(s, fmt.Sprintf("%s@%s:%d", f.function, f.file, f.line))
	}
	return strings.Join(s, " < ")
}
