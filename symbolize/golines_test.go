package symbolize

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sprof/sprof/stacks"
)

// A Go program built without DWARF but with its symbol table (go test's
// and go run's binaries, -ldflags=-w) is named by GSYM from its pclntab,
// as `go tool addr2line` names it (the function holding the address, the
// innermost file and line), the same frames the ELF symbolizer gives,
// inlined calls too, without the ELF symbolizer loading its tables. So is
// one linked by the C linker whose module record is not found (zeroed
// here): the symbol table's runtime.text, looked up only then, says where
// the pclntab counts from.
func TestGSYMGoWithoutDWARF(t *testing.T) {
	needTool(t, "readelf")
	t.Run("go linker", func(t *testing.T) {
		bin := buildGo(t, "-w")
		testGSYMGoWithoutDWARF(t, bin, bin)
	})
	t.Run("C linker, no module record", func(t *testing.T) {
		linked := buildExternal(t)
		bin := filepath.Join(t.TempDir(), "goprog-norecord")
		run(t, "", "strip", "--strip-debug", "-o", bin, linked)
		zeroModuleRecord(t, bin)
		testGSYMGoWithoutDWARF(t, bin, linked)
	})
}

// testGSYMGoWithoutDWARF symbolizes bin, a Go program without DWARF, and
// checks it against addr2line of named, the same program with symbols.
func testGSYMGoWithoutDWARF(t *testing.T, bin, named string) {
	probes := goProbes(t, named)
	var in strings.Builder
	for _, a := range probes {
		in.WriteString("0x" + strconv.FormatUint(a, 16) + "\n")
	}
	want := strings.Split(run(t, in.String(), "go", "tool", "addr2line", named), "\n")
	loads := readelfLoads(t, bin)
	g, err := NewGSYM(GSYMOptions{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	elf := NewELF(Options{})
	b := Binary{Path: bin}
	var got, old []stacks.Frame
	checked := 0
	for i, a := range probes {
		fn, pos := want[2*i], want[2*i+1]
		off, ok := fileOffset(loads, a)
		if fn == "?" || !ok {
			continue
		}
		if got, err = g.Symbolize(got[:0], b, off); err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 || got[len(got)-1].Function != fn || got[0].File+":"+strconv.Itoa(got[0].Line) != pos {
			t.Errorf("%#x: %s, go tool addr2line says %s %s", a, fmtFrames(got), fn, pos)
			continue
		}
		if old, err = elf.Symbolize(old[:0], b, off); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, old) {
			t.Errorf("%#x: %s, the ELF symbolizer says %s", a, fmtFrames(got), fmtFrames(old))
		}
		checked++
	}
	t.Logf("%d of %d probes checked", checked, len(probes))
	if checked < len(probes)*9/10 {
		t.Errorf("only %d of %d probes were checked", checked, len(probes))
	}
	if st := g.fallback.CacheStats(); st.Misses != 0 {
		t.Errorf("the ELF symbolizer loaded %d tables, want none", st.Misses)
	}
	if g.tables.statistics().Bytes == 0 {
		t.Error("the cache counts no bytes for the table")
	}
}

// A Go program with DWARF keeps the ELF symbolizer's answers where GSYM
// has no line: its inlined frames come from DWARF.
func TestGoLinesNotWithDWARF(t *testing.T) {
	bin := buildGo(t, "")
	g, err := NewGSYM(GSYMOptions{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if gl := g.goLinesOf(&gsymTable{goProgram: true}, Binary{Path: bin}); gl != nil {
		t.Error("goLines loaded for a program with DWARF")
	}
	if gl := g.goLinesOf(&gsymTable{goProgram: true}, Binary{Path: buildGo(t, "-w")}); gl == nil {
		t.Error("no goLines for a program without DWARF")
	}
}

// BenchmarkGoWithoutDWARFFirstLookup is what naming a Go program without
// DWARF costs the first time, its GSYM file converted already: goLines
// (the pclntab alone) against the ELF symbolizer's whole image. B/op is
// the heap the table takes to build.
func BenchmarkGoWithoutDWARFFirstLookup(b *testing.B) {
	bin := Binary{Path: buildGo(b, "-w")}
	g, err := NewGSYM(GSYMOptions{CacheDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	t, err := g.table(bin) // converted once, before timing
	if err != nil || t.r == nil {
		b.Fatal(err, "no GSYM")
	}
	b.Run("goLines", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			t.goTried = false
			if g.goLinesOf(t, bin) == nil {
				b.Fatal("no goLines")
			}
		}
	})
	b.Run("elf", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := NewELF(Options{}).image(bin); err != nil {
				b.Fatal(err)
			}
		}
	})
}
