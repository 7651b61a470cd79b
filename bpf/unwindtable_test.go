package bpf

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"testing"

	"github.com/sprof/sprof/sframe"
	"github.com/sprof/sprof/unwind"
)

// lookup finds the rule for addr as find_rule in sprof.bpf.c does: the
// page's slice of rows, at most tableSearchSteps halvings; false where the
// walk would stop for want of a rule.
func (t *UnwindTable) lookup(addr uint64) (unwindRule, bool) {
	off := addr - t.Base
	if addr < t.Base || off >= uint64(t.npages())<<tablePageShift {
		return unwindRule{}, false
	}
	k := off >> tablePageShift
	lo, hi := t.pages[k], t.pages[k+1]
	for i := 0; i < tableSearchSteps && lo < hi; i++ {
		mid := lo + (hi-lo+1)/2
		if uint64(t.rows[mid].PC) <= off {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	if lo < hi || uint64(t.rows[lo].PC) > off {
		return unwindRule{}, false
	}
	r := t.rules[t.rows[lo].Rule]
	return r, r.Kind != ruleGap
}

// tableSearchSteps is TABLE_SEARCH_STEPS.
const tableSearchSteps = 13

// checkTable compares every lookup the walk can make in ut, at each row's
// first byte, the byte before it and the middle of each function, with
// the SFrame table's own Lookup, converted: the layout loses no row and
// the bounded search always ends on one.
func checkTable(t *testing.T, st *sframe.Table, ut *UnwindTable) {
	t.Helper()
	conv := tableBuilder{t: &UnwindTable{}, arch: st.Arch()}
	check := func(pc uint64) {
		got, gotOK := ut.lookup(pc)
		want, ok := st.Lookup(pc)
		var wantRule unwindRule
		if ok {
			wantRule = conv.rule(&want.Row, &want.FDE)
		}
		if beyondRepeats(st, pc) {
			// Past the blocks expanded, the walk stops.
			ok, wantRule = true, unwindRule{Kind: ruleUnsupported}
		}
		if gotOK != ok || got != wantRule {
			t.Fatalf("pc %#x: walk finds %+v (%v), the SFrame table %+v (%v): %s", pc, got, gotOK, wantRule, ok, st.Describe(want))
		}
	}
	fdes := st.FDEs()
	for i := range fdes {
		f := &fdes[i]
		check(f.Start)
		check(f.Start - 1)
		check(f.Start + uint64(f.Size)/2)
		check(f.End() - 1)
		check(f.End())
		if f.PCMask() {
			for off := range min(uint64(f.Size), 1<<12) {
				check(f.Start + off)
			}
			continue
		}
		for _, r := range st.Rows(f) {
			check(f.Start + uint64(r.Start))
			check(f.Start + uint64(r.Start) - 1)
		}
	}
}

// beyondRepeats says pc lies in a block of repeated rows (a PLT's) past
// the maxRepeats that NewUnwindTable expands.
func beyondRepeats(st *sframe.Table, pc uint64) bool {
	fdes := st.FDEs() // sorted by start
	i := sort.Search(len(fdes), func(i int) bool { return fdes[i].Start > pc }) - 1
	if i < 0 {
		return false
	}
	f := &fdes[i]
	return f.PCMask() && f.RepSize > 0 && len(st.Rows(f)) > 0 && pc < f.End() && (pc-f.Start)/uint64(f.RepSize) >= maxRepeats
}

// TestUnwindTableLayout converts the tables of the fixtures (SFrame v1 to
// v3, .eh_frame only) and of this host's libc, and checks every lookup the
// walk can make against the SFrame table's own.
func TestUnwindTableLayout(t *testing.T) {
	bins := []string{deepPath, "../testdata/unwind/spin-sframe", "../testdata/unwind/spin-ehframe"}
	for _, v := range []string{"v1", "v2", "v3"} {
		bins = append(bins, "../testdata/sframe/asm-amd64-"+v, "../testdata/sframe/asm-arm64-"+v)
	}
	if libc, err := filepath.Glob("/lib/*-linux-gnu/libc.so.6"); err == nil && len(libc) > 0 {
		bins = append(bins, libc[0])
	}
	for _, path := range bins {
		t.Run(filepath.Base(filepath.Dir(path))+"/"+filepath.Base(path), func(t *testing.T) {
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			ef, err := elf.NewFile(f)
			if err != nil {
				t.Fatal(err)
			}
			hasSFrame := ef.Section(".sframe") != nil
			st, _, _, err := unwind.BuildTable(f, path, hasSFrame)
			if err != nil {
				t.Fatal(err)
			}
			ut, err := NewUnwindTable(st)
			if err != nil {
				t.Fatal(err)
			}
			checkTable(t, st, ut)
			enc, err := ut.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			if back, err := ParseUnwindTable(enc); err != nil || !reflect.DeepEqual(back, ut) {
				t.Errorf("encoded and parsed: %v; equal to the table converted %v", err, err == nil && reflect.DeepEqual(back, ut))
			}
			t.Logf("%d FDEs, %d SFrame rows: %d rows, %d pages, %d rules, %d unsupported, %d bytes",
				len(st.FDEs()), st.NumRows(), len(ut.rows), len(ut.pages)-1, len(ut.rules), ut.Unsupported, ut.Size())
		})
	}
}

// FuzzUnwindTable converts tables parsed from arbitrary SFrame sections:
// no panic, and every lookup agrees with the SFrame table's.
func FuzzUnwindTable(f *testing.F) {
	for _, v := range []string{"v1", "v2", "v3"} {
		for _, arch := range []string{"amd64", "arm64"} {
			ef, err := elf.Open("../testdata/sframe/asm-" + arch + "-" + v)
			if err != nil {
				f.Fatal(err)
			}
			s := ef.Section(".sframe")
			data, err := s.Data()
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data, s.Addr)
			ef.Close()
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, addr uint64) {
		st, err := sframe.Parse(data, addr)
		if err != nil {
			return
		}
		ut, err := NewUnwindTable(st)
		if err != nil {
			return
		}
		checkTable(t, st, ut)
	})
}

// TestParseUnwindTableRefuses: an encoded table with any byte of its
// header or of a row or rule changed (but those a row's or rule's value
// may take), or cut short, is refused with an error naming the field.
func TestParseUnwindTableRefuses(t *testing.T) {
	ut := &UnwindTable{Base: 0x1000, rows: []unwindRow{{0, 0}, {0x10, 1}, {0x40, 0}},
		rules: []unwindRule{{Kind: ruleGap}, {Kind: ruleCFASP, CFAOff: 16, RAOff: -8, Flags: ruleRASaved}}}
	good, err := ut.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	refuse := func(what string, b []byte) {
		t.Helper()
		var te *TableError
		if _, err := ParseUnwindTable(b); !errors.As(err, &te) {
			t.Errorf("%s: %v, want a *TableError", what, err)
		}
	}
	for _, i := range []int{0, 7, 16, 17, 20, 24, 28, 31} {
		b := slices.Clone(good)
		b[i] ^= 0x80
		refuse(fmt.Sprintf("byte %d flipped", i), b)
	}
	for _, c := range []struct {
		what string
		off  int
		v    byte
	}{
		{"second row's pc below the first's", tableHeaderBytes + rowBytes, 0},
		{"a row's rule past the rules", tableHeaderBytes + 4, 2},
		{"a rule's kind", tableHeaderBytes + 3*rowBytes + 8, ruleUnsupported + 1},
		{"a rule's flags", tableHeaderBytes + 3*rowBytes + ruleBytes + 9, 4},
		{"a rule's padding", tableHeaderBytes + 3*rowBytes + 10, 1},
	} {
		b := slices.Clone(good)
		b[c.off] = c.v
		refuse(c.what, b)
	}
	for n := range len(good) {
		refuse(fmt.Sprintf("cut to %d bytes", n), good[:n])
	}
	refuse("a byte more", append(slices.Clone(good), 0))
}

// FuzzParseUnwindTable: any bytes parse into a table or an error, never a
// panic; a table parsed encodes to the same bytes.
func FuzzParseUnwindTable(f *testing.F) {
	ut := &UnwindTable{Base: 0x1000, rows: []unwindRow{{0, 0}, {0x10, 1}, {0x2040, 0}},
		rules: []unwindRule{{Kind: ruleGap}, {Kind: ruleCFAFP, CFAOff: 16, RAOff: -8, FPOff: -16, Flags: ruleRASaved | ruleFPSaved}}, Unsupported: 1}
	good, err := ut.MarshalBinary()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Fuzz(func(t *testing.T, b []byte) {
		ut, err := ParseUnwindTable(b)
		if err != nil {
			return
		}
		if back, err := ut.MarshalBinary(); err != nil || !bytes.Equal(back, b) {
			t.Errorf("parsed, encoded again: %v; the same bytes %v", err, bytes.Equal(back, b))
		}
		if last := ut.rows[len(ut.rows)-1].PC; ut.npages() != last>>tablePageShift+1 {
			t.Errorf("%d pages indexed for a last row at %#x", ut.npages(), last)
		}
	})
}

// BenchmarkParseUnwindTable measures the parse of an encoded table, which
// a store keeps so that a table read again need not be converted again
// (BenchmarkNewUnwindTable), on benchLibraries: ns/row.
func BenchmarkParseUnwindTable(b *testing.B) {
	for _, path := range benchLibraries(b) {
		b.Run(filepath.Base(path), func(b *testing.B) {
			ut, err := NewUnwindTable(buildTable(b, path))
			if err != nil {
				b.Fatal(err)
			}
			enc, err := ut.MarshalBinary()
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := ParseUnwindTable(enc); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(ut.Rows()), "ns/row")
			b.ReportMetric(float64(len(enc))/float64(ut.Rows()), "bytes/row")
		})
	}
}

// BenchmarkNewUnwindTable measures the conversion of a binary's table into
// the walk's layout, which LoadTable's caller does before the table is
// written into the kernel, on benchLibraries: ns/row.
func BenchmarkNewUnwindTable(b *testing.B) {
	for _, path := range benchLibraries(b) {
		b.Run(filepath.Base(path), func(b *testing.B) {
			st := buildTable(b, path)
			var rows int
			for b.Loop() {
				ut, err := NewUnwindTable(st)
				if err != nil {
					b.Fatal(err)
				}
				rows = ut.Rows()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rows), "ns/row")
			b.ReportMetric(float64(rows), "rows")
		})
	}
}

// benchLibraries returns the libraries the table benchmarks use: libc,
// and where clang is installed libLLVM and libclang-cpp, the largest
// tables a host commonly has.
func benchLibraries(b *testing.B) []string {
	var paths []string
	for _, glob := range []string{"/usr/lib/*/libc.so.6", "/usr/lib/*/libLLVM.so.*", "/usr/lib/*/libclang-cpp.so.*"} {
		found, _ := filepath.Glob(glob)
		paths = append(paths, found...)
	}
	if len(paths) == 0 {
		b.Skip("no libc.so.6 under /usr/lib/*/")
	}
	return paths
}

// buildTable builds path's table from its .sframe or .eh_frame, as the
// collector does.
func buildTable(b *testing.B, path string) *sframe.Table {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	st, _, _, err := unwind.BuildTable(f, path, true)
	if err != nil {
		b.Fatalf("%s: %v", path, err)
	}
	return st
}
