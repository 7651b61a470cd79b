package bpf

import (
	"debug/elf"
	"os"
	"path/filepath"
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
