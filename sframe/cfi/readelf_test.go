package cfi

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/sprof/sprof/internal/testenv"
)

// loadEHFrame parses the .eh_frame of an ELF file.
func loadEHFrame(t testing.TB, path string) (*elf.File, *Frame) {
	t.Helper()
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	s := ef.Section(".eh_frame")
	if s == nil {
		t.Fatalf("%s: no .eh_frame", path)
	}
	data, err := s.Data()
	if err != nil {
		t.Fatal(err)
	}
	fr, err := Parse(Section{Kind: EHFrame, Data: data, Order: ef.ByteOrder, AddrSize: 8, Bases: Bases{Section: s.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	if len(fr.Errors) != 0 {
		t.Fatalf("%s: %v", path, fr.Errors)
	}
	return ef, fr
}

// readelfRow is one row of `readelf --debug-dump=frames-interp`: the
// location, the CFA and a cell per register column.
type readelfRow struct {
	loc   uint64
	cfa   string
	cells map[string]string
}

// readelfFrames runs readelf -wF and returns the rows of every FDE by its
// section offset. FDEs whose instructions change nothing print no table.
func readelfFrames(t *testing.T, readelf, path string) map[uint64][]readelfRow {
	t.Helper()
	testenv.RequireTool(t, readelf)
	// readelf 2.40 exits with 1 on libc without saying why; what it
	// printed is complete.
	out, err := exec.Command(readelf, "--debug-dump=frames-interp", path).Output()
	if err != nil && !bytes.Contains(out, []byte(" FDE ")) {
		t.Fatalf("%s %s: %v", readelf, path, err)
	}
	fdes := make(map[uint64][]readelfRow)
	var cur uint64
	var cols []string
	inFDE := false
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 4 && f[3] == "FDE":
			off, err := strconv.ParseUint(f[0], 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			cur, inFDE = off, true
		case len(f) >= 4 && f[3] == "CIE":
			inFDE = false
		case len(f) >= 2 && f[0] == "LOC":
			cols = f[2:]
		case inFDE && len(f) == len(cols)+2 && len(f[0]) == 16:
			loc, err := strconv.ParseUint(f[0], 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			r := readelfRow{loc: loc, cfa: f[1], cells: make(map[string]string)}
			for i, c := range cols {
				r.cells[c] = f[i+2]
			}
			fdes[cur] = append(fdes[cur], r)
		}
	}
	return fdes
}

// cell prints a rule as readelf -wF does, as far as the comparison needs:
// "u" unspecified or undefined, "s" same value, "c-16" saved at an offset
// from the CFA, "v-16" the CFA plus an offset, "exp"/"vexp" expressions,
// "reg" in another register.
func cell(r Rule) string {
	switch r.Kind {
	case RuleSameValue:
		return "s"
	case RuleOffset:
		return fmt.Sprintf("c%+d", r.Offset)
	case RuleValOffset:
		return fmt.Sprintf("v%+d", r.Offset)
	case RuleExpression:
		return "exp"
	case RuleValExpression:
		return "vexp"
	case RuleRegister:
		return "reg"
	}
	return "u"
}

func readelfCell(s string) string {
	switch {
	case s == "u", s == "s", s == "exp", s == "vexp":
		return s
	case strings.HasPrefix(s, "c") || strings.HasPrefix(s, "v"):
		if _, err := strconv.Atoi(s[1:]); err == nil {
			return s
		}
	}
	return "reg"
}

var (
	amd64RegNames = []string{"rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rip"}
)

func cfaCell(c CFARule, aarch64 bool) string {
	switch c.Kind {
	case CFAExpression:
		return "exp"
	case CFAUnset:
		return "u"
	}
	name := fmt.Sprintf("r%d", c.Reg)
	switch {
	case aarch64 && c.Reg == 31:
		name = "sp"
	case aarch64 && c.Reg < 31:
		name = fmt.Sprintf("x%d", c.Reg)
	case !aarch64 && c.Reg < uint64(len(amd64RegNames)):
		name = amd64RegNames[c.Reg]
	}
	return fmt.Sprintf("%s%+d", name, c.Offset)
}

// compareWithReadelf interprets every FDE of path and compares the rule in
// effect at each of readelf's rows for the CFA, the frame pointer and
// the return address. It returns the number of rows compared.
func compareWithReadelf(t *testing.T, readelf, path string, aarch64 bool) int {
	ef, fr := loadEHFrame(t, path)
	defer ef.Close()
	want := readelfFrames(t, readelf, path)
	fpName, raReg, fpReg := "rbp", uint64(16), uint64(6)
	if aarch64 {
		fpName, raReg, fpReg = "x29", 30, 29
	}
	in := Interpreter{Track: []uint64{fpReg, raReg}, AArch64: aarch64}
	n := 0
	for i := range fr.FDEs {
		f := &fr.FDEs[i]
		rows, err := in.Rows(f)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		for _, w := range want[f.Offset] {
			j := len(rows) - 1
			for j > 0 && rows[j].Start > w.loc {
				j--
			}
			r := rows[j]
			got := []string{cfaCell(r.CFA, aarch64), cell(r.Regs[0]), cell(r.Regs[1])}
			exp := []string{w.cfa, readelfCell(cellOr(w.cells, fpName)), readelfCell(cellOr(w.cells, "ra"))}
			if strings.Join(got, " ") != strings.Join(exp, " ") {
				t.Errorf("%s: FDE at %#x, row %#x: got %q, readelf %q", path, f.Offset, w.loc, got, exp)
			}
			n++
		}
	}
	if len(want) == 0 || n == 0 {
		t.Fatalf("%s: nothing compared", path)
	}
	return n
}

func cellOr(m map[string]string, k string) string {
	if v, ok := m[k]; ok {
		return v
	}
	return "u"
}

// TestReadelfLibc compares the interpretation of every FDE of the host's
// libc (amd64) and of Debian's aarch64 cross libc with binutils' own.
func TestReadelfLibc(t *testing.T) {
	for _, c := range []struct {
		readelf, path string
		aarch64       bool
	}{
		{"readelf", "/lib/x86_64-linux-gnu/libc.so.6", false},
		{"aarch64-linux-gnu-readelf", "/usr/aarch64-linux-gnu/lib/libc.so.6", true},
		{"readelf", "../../testdata/sframe/chain-amd64-v3", false},
		{"aarch64-linux-gnu-readelf", "../../testdata/sframe/chain-arm64-v3", true},
	} {
		if _, err := os.Stat(c.path); err != nil {
			testenv.Unavailable(t, err.Error())
		}
		n := compareWithReadelf(t, c.readelf, c.path, c.aarch64)
		t.Logf("%s: %d rows agree with %s", c.path, n, c.readelf)
	}
}
