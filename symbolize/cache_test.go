package symbolize

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// TestOpenedOnce symbolizes one binary from many goroutines at once: the
// file is read once and every lookup agrees.
func TestOpenedOnce(t *testing.T) {
	s := NewELF(Options{})
	b := Binary{Path: fixture("c-O2")}
	want, err := s.Symbolize(nil, b, 0x1080)
	if err != nil || len(want) != 1 || want[0].Function != "main" {
		t.Fatalf("Symbolize = %+v, %v; want main", want, err)
	}
	s = NewELF(Options{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				got, err := s.Symbolize(nil, b, 0x1080)
				if err != nil || len(got) != 1 || got[0] != want[0] {
					t.Errorf("Symbolize = %+v, %v; want %+v", got, err, want)
					return
				}
			}
		})
	}
	wg.Wait()
	st := s.CacheStats()
	if st.Misses != 1 || st.Hits != 8*200-1 || st.Tables != 1 || st.Bytes <= 0 {
		t.Errorf("CacheStats = %+v; want 1 miss, %d hits, 1 table", st, 8*200-1)
	}
}

// TestCacheBudget alternates two binaries under a budget that fits one.
func TestCacheBudget(t *testing.T) {
	s := NewELF(Options{CacheBytes: 1})
	for range 3 {
		for _, c := range []struct {
			name string
			off  uint64
		}{{"c-O2", 0x1080}, {"cpp-O2", 0x2080}} {
			got, err := s.Symbolize(nil, Binary{Path: fixture(c.name)}, c.off)
			if err != nil || len(got) == 0 {
				t.Fatalf("%s: %+v, %v", c.name, got, err)
			}
		}
	}
	st := s.CacheStats()
	if st.Tables != 1 || st.Misses != 6 || st.Evictions != 5 {
		t.Errorf("CacheStats = %+v; want 1 table, 6 misses, 5 evictions", st)
	}
}

// TestKeyedByBuildID gives two paths of one build ID: one load.
func TestKeyedByBuildID(t *testing.T) {
	id, err := buildIDOf(fixture("c-O2"))
	if err != nil {
		t.Fatal(err)
	}
	s := NewELF(Options{})
	for _, p := range []string{fixture("c-O2"), fixture("c-stripped")} {
		got, err := s.Symbolize(nil, Binary{Path: p, BuildID: id}, 0x1080)
		if err != nil || len(got) != 1 || got[0].Function != "main" {
			t.Fatalf("%s: %+v, %v", p, got, err)
		}
	}
	if st := s.CacheStats(); st.Misses != 1 {
		t.Errorf("CacheStats = %+v; want 1 miss", st)
	}
}

func TestContainerRoot(t *testing.T) {
	for path, want := range map[string]string{
		"/proc/42/root/usr/lib/libc.so.6": "/proc/42/root",
		"/proc/42/map_files/1000-2000":    "",
		"/proc/self/root/bin/ls":          "",
		"/usr/lib/libc.so.6":              "",
		"/proc/42/root":                   "",
	} {
		if got := containerRoot(path); got != want {
			t.Errorf("containerRoot(%q) = %q, want %q", path, got, want)
		}
	}
}

func TestSymbolizeErrors(t *testing.T) {
	dir := t.TempDir()
	notELF := filepath.Join(dir, "script")
	if err := os.WriteFile(notELF, []byte("#!/bin/sh\necho this is not an ELF file\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := NewELF(Options{})
	if _, err := s.Symbolize(nil, Binary{Path: notELF}, 0); !errors.Is(err, ErrMalformed) {
		t.Errorf("not ELF: err = %v, want ErrMalformed", err)
	}
	if _, err := s.Symbolize(nil, Binary{Path: filepath.Join(dir, "missing")}, 0); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing: err = %v, want ErrNotExist", err)
	}
	// A file that could not be opened under a build ID is tried again
	// when it can: the failure is not cached.
	id, err := buildIDOf(fixture("c-O2"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Symbolize(nil, Binary{Path: filepath.Join(dir, "gone"), BuildID: id}, 0x1080); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("exited process: err = %v, want ErrNotExist", err)
	}
	if got, err := s.Symbolize(nil, Binary{Path: fixture("c-O2"), BuildID: id}, 0x1080); err != nil || len(got) != 1 {
		t.Errorf("after a failed open: %+v, %v", got, err)
	}
	if _, err := s.Symbolize(nil, Binary{Path: dir}, 0); err == nil {
		t.Errorf("directory: no error")
	}
	// Offsets outside every loaded segment give no frames and no error.
	got, err := s.Symbolize(nil, Binary{Path: fixture("c-O2")}, 1<<40)
	if err != nil || len(got) != 0 {
		t.Errorf("offset past the file: %+v, %v", got, err)
	}
}
