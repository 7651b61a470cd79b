package unwind

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/sprof/sprof/sframe"
)

// storedLibraries are the host's binaries the round trip is checked on:
// libc (sprof's commonest table), libstdc++ (C++ unwinding, PLT entries),
// libLLVM (the largest table a host usually has) where installed.
var storedLibraries = []string{
	"/lib/x86_64-linux-gnu/libc.so.6",
	"/lib/aarch64-linux-gnu/libc.so.6",
	"/lib/x86_64-linux-gnu/libstdc++.so.6",
	"/lib/x86_64-linux-gnu/libLLVM.so.22.1",
}

// TestStoreRoundTrip: a table built from a real library, stored and
// loaded, has the same functions and the same rule at every row.
func TestStoreRoundTrip(t *testing.T) {
	s, err := OpenStore(t.TempDir(), "producer-a")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, lib := range storedLibraries {
		f, err := os.Open(lib)
		if err != nil {
			continue
		}
		built, kind, _, err := BuildTable(f, lib, false)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", lib, err)
		}
		if err := s.Save("00ff"+string(rune('a'+n)), false, built, kind); err != nil {
			t.Fatalf("%s: %v", lib, err)
		}
		got, gotKind, err := s.Load("00ff"+string(rune('a'+n)), false)
		if err != nil {
			t.Fatalf("%s: %v", lib, err)
		}
		if gotKind != kind {
			t.Errorf("%s: method %v, stored %v", lib, gotKind, kind)
		}
		sameTable(t, lib, built, got)
		n++
	}
	if n == 0 {
		t.Skipf("none of %v on this host", storedLibraries)
	}
}

// sameTable fails t unless b has a's functions, each with a's rows.
func sameTable(t *testing.T, name string, a, b *sframe.Table) {
	t.Helper()
	fa, fb := a.FDEs(), b.FDEs()
	if len(fa) != len(fb) || a.NumRows() != b.NumRows() || a.Arch() != b.Arch() || a.Addr != b.Addr {
		t.Fatalf("%s: %d functions, %d rows, %v at %#x; stored: %d, %d, %v at %#x",
			name, len(fa), a.NumRows(), a.Arch(), a.Addr, len(fb), b.NumRows(), b.Arch(), b.Addr)
	}
	for i := range fa {
		x, y := &fa[i], &fb[i]
		if x.Start != y.Start || x.Size != y.Size || x.PCMask() != y.PCMask() || x.RepSize != y.RepSize ||
			x.PACKeyB() != y.PACKeyB() || x.Signal() != y.Signal() {
			t.Fatalf("%s: function %d: %+v, stored %+v", name, i, *x, *y)
		}
		ra, rb := a.Rows(x), b.Rows(y)
		if len(ra) != len(rb) {
			t.Fatalf("%s: function at %#x: %d rows, stored %d", name, x.Start, len(ra), len(rb))
		}
		for j := range ra {
			p, q := &ra[j], &rb[j]
			if p.Start != q.Start || p.CFA != q.CFA || p.RA != q.RA || p.FP != q.FP || p.Mangled() != q.Mangled() {
				t.Fatalf("%s: function at %#x, row %d: %+v, stored %+v", name, x.Start, j, *p, *q)
			}
		}
	}
}

// twoProducers opens two stores over one directory, of producers a and b.
func twoProducers(t *testing.T) (dir string, a, b *Store) {
	t.Helper()
	dir = t.TempDir()
	a, err := OpenStore(dir, "producer-a")
	if err != nil {
		t.Fatal(err)
	}
	b, err = OpenStore(dir, "producer-b")
	if err != nil {
		t.Fatal(err)
	}
	return dir, a, b
}

// TestStoreRefuses: a missing table, another producer's, one whose file
// was damaged anywhere, and a malformed build ID are not loaded; a
// damaged one says where.
func TestStoreRefuses(t *testing.T) {
	dir, a, b := twoProducers(t)
	table := smallTable(t)
	if _, _, err := a.Load("abcd", false); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing table: %v, want ErrNotExist", err)
	}
	if err := a.Save("abcd", false, table, MethodEHFrame); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Load("abcd", true); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("table of the binary without .sframe loaded for it with one: %v", err)
	}
	if _, _, err := b.Load("abcd", false); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("another producer's table: %v, want ErrNotExist", err)
	}
	if _, _, err := a.Load("../etc", false); err == nil || errors.Is(err, fs.ErrNotExist) {
		t.Errorf("build ID ../etc: %v, want an error naming it", err)
	}
	checkEveryByteFlipped(t, filepath.Join(dir, "abcd.eh.unwind"), func() error {
		_, _, err := a.Load("abcd", false)
		return err
	})
}

// checkEveryByteFlipped fails t unless load, with any one byte of the
// stored file path flipped, returns a *StoredError naming path.
func checkEveryByteFlipped(t *testing.T, path string, load func() error) {
	t.Helper()
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range good {
		bad := append([]byte(nil), good...)
		bad[i] ^= 0x40
		if err := os.WriteFile(path, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		var se *StoredError
		if err := load(); !errors.As(err, &se) || se.Path != path {
			t.Fatalf("byte %d flipped: %v, want a *StoredError naming %s", i, err, path)
		}
	}
}

// TestStoreDerived: a derived form comes back as saved, beside the table
// and apart from it, only to its producer and for the binary it was saved
// for; a damaged file or a name that is not one is an error that says so.
func TestStoreDerived(t *testing.T) {
	dir, a, b := twoProducers(t)
	if _, err := a.LoadDerived("abcd", false, "kernel"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing form: %v, want ErrNotExist", err)
	}
	form := []byte("the kernel's layout of abcd's table")
	if err := a.SaveDerived("abcd", false, "kernel", form); err != nil {
		t.Fatal(err)
	}
	if got, err := a.LoadDerived("abcd", false, "kernel"); err != nil || string(got) != string(form) {
		t.Errorf("loaded %q, %v; want %q", got, err, form)
	}
	if _, _, err := a.Load("abcd", false); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the table, never saved, after its derived form: %v, want ErrNotExist", err)
	}
	for _, miss := range []struct {
		s         *Store
		sframe    bool
		name, why string
	}{{a, true, "kernel", "for the binary with .sframe"}, {a, false, "other", "another form"}, {b, false, "kernel", "another producer's"}} {
		if _, err := miss.s.LoadDerived("abcd", miss.sframe, miss.name); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: %v, want ErrNotExist", miss.why, err)
		}
	}
	for _, name := range []string{"", "unwind", "../x", "Kernel"} {
		if err := a.SaveDerived("abcd", false, name, form); err == nil {
			t.Errorf("form named %q saved", name)
		}
	}
	checkEveryByteFlipped(t, filepath.Join(dir, "abcd.eh.kernel"), func() error {
		_, err := a.LoadDerived("abcd", false, "kernel")
		return err
	})
}

// smallTable is a table of one function, as a compiler's CFI gives it.
func smallTable(tb testing.TB) *sframe.Table {
	fdes := []sframe.Function{{Start: 0x1000, Size: 0x40, Rows: []sframe.Row{
		{Start: 0, CFA: sframe.Loc{Kind: sframe.LocReg, Reg: 7, Off: 8}, RA: sframe.Loc{Kind: sframe.LocCFA, Deref: true, Off: -8}},
		{Start: 1, CFA: sframe.Loc{Kind: sframe.LocReg, Reg: 7, Off: 16}, RA: sframe.Loc{Kind: sframe.LocCFA, Deref: true, Off: -8}},
	}}}
	t, err := sframe.NewTable(sframe.ABIAMD64LE, fdes)
	if err != nil {
		tb.Fatal(err)
	}
	return t
}

// FuzzDecodeStored: any file decodes to a table or an error, never a
// panic, within the bounds the header's lengths are checked against.
func FuzzDecodeStored(f *testing.F) {
	table := smallTable(f)
	seed, err := encodeStored("producer", table, MethodEHFrame)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte(storedMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, tab, _, err := decodeStored(data)
		if err == nil && tab == nil {
			t.Fatal("no table and no error")
		}
	})
}

// BenchmarkStoreLoad measures reading a stored table against building it,
// for the largest of storedLibraries on the host (libLLVM's where
// installed): ns/op is one table.
func BenchmarkStoreLoad(b *testing.B) {
	var lib string
	for _, l := range storedLibraries {
		if _, err := os.Stat(l); err == nil {
			lib = l
		}
	}
	if lib == "" {
		b.Skipf("none of %v on this host", storedLibraries)
	}
	f, err := os.Open(lib)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	s, err := OpenStore(b.TempDir(), "producer")
	if err != nil {
		b.Fatal(err)
	}
	build := func() *sframe.Table {
		t, _, _, err := BuildTable(f, lib, false)
		if err != nil {
			b.Fatal(err)
		}
		return t
	}
	if err := s.Save("abcd", false, build(), MethodEHFrame); err != nil {
		b.Fatal(err)
	}
	b.Run("load", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := s.Load("abcd", false); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("build", func(b *testing.B) {
		for b.Loop() {
			build()
		}
	})
}
