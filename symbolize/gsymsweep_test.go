package symbolize

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestGSYMSweep uses two binaries, then only one of them across two
// sweeps: the other's file leaves the cache and, once collected, the
// process's mappings (/proc/self/maps), while the used one stays mapped.
func TestGSYMSweep(t *testing.T) {
	dir := t.TempDir()
	s, err := NewGSYM(GSYMOptions{CacheDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	c, cpp := Binary{Path: fixture("c-O2")}, Binary{Path: fixture("cpp-O2")}
	cFile := mapOne(t, s, dir, c, 0x1080)
	cppFile := mapOne(t, s, dir, cpp, 0x2080)
	for _, f := range []string{cFile, cppFile} {
		if !mapped(t, f) {
			t.Fatalf("%s not in /proc/self/maps after a lookup", f)
		}
	}

	s.Sweep() // both used since the start: both stay
	if _, err := s.Symbolize(nil, cpp, 0x2080); err != nil {
		t.Fatal(err)
	}
	s.Sweep() // c unused since the first sweep
	if st := s.tables.statistics(); st.Tables != 1 || st.Evictions != 1 {
		t.Fatalf("GSYM tables after two sweeps = %+v; want 1 table, 1 eviction", st)
	}
	m := *s.front.Load()
	if len(m) != 1 {
		t.Fatalf("front holds %d tables; want 1", len(m))
	}
	for _, kept := range m {
		// Sized again by the sweep, with the strings its lookups kept.
		if got, want := s.tables.statistics().Bytes, kept.cost(); got != want || kept.shownCount.Load() == 0 {
			t.Errorf("kept table counted as %d bytes; want %d, its cost with %d strings shown", got, want, kept.shownCount.Load())
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for mapped(t, cFile) {
		if time.Now().After(deadline) {
			t.Fatalf("%s still mapped 10 s after its table was swept", cFile)
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if !mapped(t, cppFile) {
		t.Errorf("%s, in use, was unmapped", cppFile)
	}
	// The swept binary maps again on its next lookup.
	if got, err := s.Symbolize(nil, c, 0x1080); err != nil || len(got) == 0 || got[0].Function != "main" {
		t.Errorf("lookup after the sweep = %+v, %v; want main", got, err)
	}
}

// mapOne looks up off in b through s, whose cache directory is dir, and
// returns the GSYM file the lookup mapped.
func mapOne(t *testing.T, s *GSYM, dir string, b Binary, off uint64) string {
	t.Helper()
	before, _ := filepath.Glob(filepath.Join(dir, "gsym", "*.gsym"))
	if got, err := s.Symbolize(nil, b, off); err != nil || len(got) == 0 {
		t.Fatalf("%s: %+v, %v", b.Path, got, err)
	}
	after, _ := filepath.Glob(filepath.Join(dir, "gsym", "*.gsym"))
	for _, f := range after {
		if !strings.Contains(strings.Join(before, "\n"), f) {
			return f
		}
	}
	t.Fatalf("%s: no GSYM file written", b.Path)
	return ""
}

// mapped reports whether the file p is mapped in this process.
func mapped(t *testing.T, p string) bool {
	t.Helper()
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(maps), p)
}

// TestELFSweep: an ELF symbolizer's table unused between two sweeps is
// dropped, a used one kept.
func TestELFSweep(t *testing.T) {
	s := NewELF(Options{})
	c, cpp := Binary{Path: fixture("c-O2")}, Binary{Path: fixture("cpp-O2")}
	for range 2 {
		for _, b := range []Binary{c, cpp} {
			if _, err := s.Symbolize(nil, b, 0x1080); err != nil {
				t.Fatal(err)
			}
		}
		s.Sweep()
	}
	if st := s.CacheStats(); st.Tables != 2 || st.Evictions != 0 {
		t.Fatalf("CacheStats after use and a sweep = %+v; want 2 tables", st)
	}
	if _, err := s.Symbolize(nil, cpp, 0x1080); err != nil {
		t.Fatal(err)
	}
	s.Sweep()
	st := s.CacheStats()
	if st.Tables != 1 || st.Evictions != 1 || st.Misses != 2 || st.Hits != 3 {
		t.Errorf("CacheStats = %+v; want 1 table, 1 eviction, 2 misses, 3 hits", st)
	}
}

// TestGSYMBudget loads the fixtures under a budget that holds about half
// of them: the GSYM files, counted with their mappings, and the ELF
// symbolizer's tables each stay within their half, and their total within
// CacheBytes.
func TestGSYMBudget(t *testing.T) {
	dir := t.TempDir()
	// Sized from the files the conversions write.
	probe, err := NewGSYM(GSYMOptions{CacheDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	bins := []string{"c-O2", "cpp-O2", "c-debuglink", "c-minidebug", "c-minidebug.full", "c-O2-arm64"}
	var largest int64
	for _, name := range bins {
		// Offsets outside every binary's text still load its table.
		if _, err := probe.Symbolize(nil, Binary{Path: fixture(name)}, 0x1080); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "gsym", "*.gsym"))
	if len(files) < 4 {
		t.Fatalf("%d GSYM files written; want one per binary with functions", len(files))
	}
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		largest = max(largest, st.Size())
	}
	all := probe.tables.statistics().Bytes
	if all < largest {
		t.Errorf("GSYM tables counted as %d bytes, less than the largest file alone (%d)", all, largest)
	}

	// Half of it, for the GSYM files, holds about half of them.
	budget := all
	s, err := NewGSYM(GSYMOptions{Options: Options{CacheBytes: budget}, CacheDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		for _, name := range bins {
			if _, err := s.Symbolize(nil, Binary{Path: fixture(name)}, 0x1080); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			g, e := s.tables.statistics(), s.fallback.CacheStats()
			if g.Tables > 1 && g.Bytes > budget/2 || e.Tables > 1 && e.Bytes > budget/2 {
				t.Fatalf("after %s: GSYM files %d bytes, ELF tables %d bytes; want each within %d", name, g.Bytes, e.Bytes, budget/2)
			}
		}
	}
	st := s.CacheStats()
	t.Logf("budget %d, largest file %d: %+v", budget, largest, st)
	if st.Evictions == 0 || st.Bytes > budget {
		t.Errorf("CacheStats = %+v; want evictions and at most %d bytes", st, budget)
	}
}

// TestGSYMCacheStats counts a GSYM symbolizer's misses, hits and tables.
func TestGSYMCacheStats(t *testing.T) {
	s, err := NewGSYM(GSYMOptions{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	b := Binary{Path: fixture("c-O2")}
	for range 10 {
		if _, err := s.Symbolize(nil, b, 0x1080); err != nil {
			t.Fatal(err)
		}
	}
	st := s.CacheStats()
	if st.Misses != 1 || st.Hits != 9 || st.Tables != 1 || st.Bytes <= 0 || st.Evictions != 0 {
		t.Errorf("CacheStats = %+v; want 1 miss, 9 hits, 1 table", st)
	}
	s.Sweep()
	s.Sweep()
	if st := s.CacheStats(); st.Tables != 0 || st.Bytes != 0 || st.Evictions != 1 {
		t.Errorf("CacheStats after two idle sweeps = %+v; want nothing held, 1 eviction", st)
	}
}

// TestGSYMSweepConcurrent sweeps while lookups run: every lookup still
// answers (a table swept under a lookup is unmapped only once unused).
func TestGSYMSweepConcurrent(t *testing.T) {
	s, err := NewGSYM(GSYMOptions{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	b := Binary{Path: fixture("c-O2")}
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
				s.Sweep()
				runtime.GC()
			}
		}
	})
	for range 2 {
		wg.Go(func() {
			for range 300 {
				if got, err := s.Symbolize(nil, b, 0x1080); err != nil || len(got) != 1 || got[0].Function != "main" {
					t.Errorf("Symbolize during sweeps = %+v, %v; want main", got, err)
					return
				}
			}
		})
	}
	time.Sleep(50 * time.Millisecond)
	close(done)
	wg.Wait()
}
