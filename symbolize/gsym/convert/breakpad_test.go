package convert

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sprof/sprof/symbolize/gsym"
)

// TestBreakpadHandWritten converts a hand-written .sym with every record
// type and checks lookups, inline stacks included.
func TestBreakpadHandWritten(t *testing.T) {
	c, st, err := BreakpadFile(filepath.Join(fixtures, "hand.sym"))
	if err != nil {
		t.Fatal(err)
	}
	if st != (BreakpadStats{Functions: 2, Publics: 2, Inlines: 2}) {
		t.Errorf("stats %+v", st)
	}
	r := encodeAndRead(t, c)
	if got := fmt.Sprintf("%x", r.Header().UUID); got != "1a2b3c4d5e6f70819293a4b5c6d7e8f9" {
		t.Errorf("UUID %s", got)
	}
	addrs := []uint64{0xfff, 0x1000, 0x1009, 0x1012, 0x1019, 0x1030, 0x1045, 0x1050, 0x1fff, 0x2000, 0x2010}
	want := []string{
		"0x0000000000000fff: error: address 0xfff is not in GSYM",
		"0x0000000000001000: main @ /src/main.c:10",
		"0x0000000000001009: helper + 1 @ /src/main.c:11 [inlined]\n                    main + 9 @ /src/main.c:11",
		"0x0000000000001012: inner helper + 2 @ /src/main.c:11 [inlined]\n                    helper + 10 @ /src/util.h:4 [inlined]\n                    main + 18 @ /src/main.c:11",
		"0x0000000000001019: helper + 17 @ /src/util.h:3 [inlined]\n                    main + 25 @ /src/main.c:11",
		"0x0000000000001030: main + 48 @ /src/main.c:12",
		"0x0000000000001045: dup_name + 5 @ /src/main.c:20",
		"0x0000000000001050: tail_symbol",
		"0x0000000000001fff: tail_symbol + 4015",
		"0x0000000000002000: other symbol",
		"0x0000000000002010: other symbol + 16",
	}
	got := ourLookups(r, addrs)
	for i := range addrs {
		if got[i] != want[i] {
			t.Errorf("0x%x:\n got: %s\nwant: %s", addrs[i], got[i], want[i])
		}
	}
}

func TestBreakpadErrors(t *testing.T) {
	for _, tc := range []struct{ name, sym, msg string }{
		{"empty", "MODULE Linux x86_64 00 x\n", "no FUNC or PUBLIC"},
		{"bad func", "FUNC zz 10 0 f\n", "line 1"},
		{"unknown file", "FUNC 10 10 0 f\n10 4 1 9\n", "unknown FILE 9"},
		{"inline outside", "INLINE 0 1 0 0 10 4\n", "outside a FUNC"},
		{"deep inline", "FUNC 10 10 0 f\nINLINE 999 1 0 0 10 4\n", "too deep"},
	} {
		_, _, err := Breakpad(strings.NewReader(tc.sym))
		if err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.msg)
		}
	}
}

// encodeAndRead encodes c as version 1 and opens the result.
func encodeAndRead(t *testing.T, c *gsym.Creator) *gsym.Reader {
	t.Helper()
	b, err := c.Encode(gsym.EncodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := gsym.NewReader(b)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var writeBreakpadFixture = flag.Bool("write-breakpad-fixture", false, "rewrite testdata/gsym/cinline.sym from cinline's DWARF")

// writeBreakpad writes the functions of r as a Breakpad .sym file, the
// way dump_syms lays one out: FILE and INLINE_ORIGIN tables, then FUNC
// records with line and INLINE records; functions with neither lines nor
// size become PUBLIC records.
func writeBreakpad(r *gsym.Reader, module string) ([]byte, error) {
	var files, body bytes.Buffer
	fmt.Fprintf(&files, "MODULE Linux x86_64 %X0 %s\nINFO CODE_ID %x\n", r.Header().UUID, module, r.Header().UUID)
	for i := 1; i < r.NumFiles(); i++ {
		d, b, _ := r.File(uint32(i))
		loc := gsym.SourceLocation{Dir: d, Base: b}
		fmt.Fprintf(&files, "FILE %d %s\n", i, loc.Path())
	}
	var origins []string
	origin := func(name string) int {
		if i := slices.Index(origins, name); i >= 0 {
			return i
		}
		origins = append(origins, name)
		return len(origins) - 1
	}
	var inlines func(n *gsym.InlineInfo, level int)
	inlines = func(n *gsym.InlineInfo, level int) {
		fmt.Fprintf(&body, "INLINE %d %d %d %d", level, n.CallLine, n.CallFile, origin(n.Name))
		for _, rg := range n.Ranges {
			fmt.Fprintf(&body, " %x %x", rg.Start, rg.Size())
		}
		body.WriteString("\n")
		for i := range n.Children {
			inlines(&n.Children[i], level+1)
		}
	}
	for i := 0; i < r.NumFunctions(); i++ {
		f, err := r.FunctionInfo(i)
		if err != nil {
			return nil, err
		}
		if f.Range.Size() == 0 {
			fmt.Fprintf(&body, "PUBLIC %x 0 %s\n", f.Range.Start, f.Name)
			continue
		}
		fmt.Fprintf(&body, "FUNC %x %x 0 %s\n", f.Range.Start, f.Range.Size(), f.Name)
		for j, row := range f.Lines {
			end := f.Range.End
			if j+1 < len(f.Lines) {
				end = f.Lines[j+1].Addr
			}
			if end > row.Addr { // of rows at one address the last one counts
				fmt.Fprintf(&body, "%x %x %d %d\n", row.Addr, end-row.Addr, row.Line, row.File)
			}
		}
		if f.Inline != nil {
			for j := range f.Inline.Children {
				inlines(&f.Inline.Children[j], 0)
			}
		}
	}
	for i, o := range origins {
		fmt.Fprintf(&files, "INLINE_ORIGIN %d %s\n", i, o)
	}
	return append(files.Bytes(), body.Bytes()...), nil
}

// TestWriteBreakpadFixture regenerates cinline.sym (run by
// scripts/gsym-fixtures.sh with -write-breakpad-fixture) from the GSYM
// that sprof converts from cinline's DWARF.
func TestWriteBreakpadFixture(t *testing.T) {
	if !*writeBreakpadFixture {
		t.Skip("run with -write-breakpad-fixture to regenerate testdata/gsym/cinline.sym")
	}
	c, _, err := ELF(filepath.Join(fixtures, "cinline"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	sym, err := writeBreakpad(encodeAndRead(t, c), "cinline")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(fixtures, "cinline.sym"), sym, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestBreakpadFromBinary converts the .sym generated from cinline's DWARF
// and compares its lookups with LLVM's GSYM of the binary, inside every
// function.
func TestBreakpadFromBinary(t *testing.T) {
	c, _, err := BreakpadFile(filepath.Join(fixtures, "cinline.sym"))
	if err != nil {
		t.Fatal(err)
	}
	r := encodeAndRead(t, c)
	llvm := openFixture(t, "cinline.llvm.gsym")
	var addrs []uint64
	for _, a := range probeAddresses(t, llvm) {
		if res, err := llvm.Lookup(a); err == nil && res.FuncRange.Size() > 0 && res.FuncRange.Contains(a) {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) < 200 {
		t.Fatalf("only %d addresses to compare", len(addrs))
	}
	compareLookups(t, "Breakpad-converted cinline", addrs, ourLookups(r, addrs), ourLookups(llvm, addrs))
}
