package convert

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sprof/sprof/symbolize/gsym"

	"github.com/sprof/sprof/internal/testenv"
)

const fixtures = "../../../testdata/gsym"

type oracleFixture struct {
	name, binary, llvm string
	// merged: LLVM converted with --merged-functions --dwarf-callsites,
	// which sprof's converter does not do (nor llvm-gsymutil by default):
	// the file serves the reader tests only.
	merged bool
}

// oracleFixtures are the binaries scripts/gsym-fixtures.sh builds, each
// with the GSYM file llvm-gsymutil-22 made of it.
var oracleFixtures = []oracleFixture{
	{"C -O2 inlining", "cinline", "cinline.llvm.gsym", false},
	{"C++ templates and namespaces", "cxx", "cxx.llvm.gsym", false},
	{"C++ built by g++", "cxxgcc", "cxxgcc.llvm.gsym", false},
	{"Go", "gofix", "gofix.llvm.gsym", false},
	{"separate debug file", "debuglink", "debuglink.llvm.gsym", false},
	// LLVM wrote this one with --merged-functions --dwarf-callsites.
	{"merged functions and call sites", "icf", "icf.llvm.gsym", true},
}

// llvmGsymutil returns the oracle's path, skipping the test when it is
// missing except under CI, where `make test` installs it.
func llvmGsymutil(t testing.TB) string {
	t.Helper()
	return testenv.RequireTool(t, "llvm-gsymutil-22")
}

// probeAddresses returns the addresses the oracle tests look up in r:
// every byte of small functions; start, interior and last bytes of larger
// ones; one past every end; and addresses before the first and after the
// last function.
func probeAddresses(t testing.TB, r *gsym.Reader) []uint64 {
	var addrs []uint64
	n := r.NumFunctions()
	if n == 0 {
		return nil
	}
	addrs = append(addrs, 0, r.Address(0)-1)
	for i := 0; i < n; i++ {
		f, err := r.FunctionInfo(i)
		if err != nil {
			t.Fatalf("function %d: %v", i, err)
		}
		s, e := f.Range.Start, f.Range.End
		if e-s <= 96 {
			for a := s; a < e; a++ {
				addrs = append(addrs, a)
			}
		} else {
			addrs = append(addrs, s, s+1, s+(e-s)/3, s+(e-s)/2, e-2, e-1)
			for _, row := range f.Lines {
				addrs = append(addrs, row.Addr)
			}
		}
		addrs = append(addrs, e, e+1)
	}
	slices.Sort(addrs)
	return slices.Compact(addrs)
}

// llvmLookups runs llvm-gsymutil --addresses-from-stdin on file.
func llvmLookups(t testing.TB, tool, file string, addrs []uint64) []string {
	var in bytes.Buffer
	for _, a := range addrs {
		in.WriteString("0x" + strconv.FormatUint(a, 16) + " " + file + "\n")
	}
	cmd := exec.Command(tool, "--addresses-from-stdin")
	cmd.Stdin = &in
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("llvm-gsymutil on %s: %v", file, err)
	}
	res := strings.Split(strings.TrimSuffix(string(out), "\n\n"), "\n\n")
	if len(res) != len(addrs) {
		t.Fatalf("llvm-gsymutil gave %d results for %d addresses", len(res), len(addrs))
	}
	return res
}

// ourLookups formats sprof's reader's answers like llvm-gsymutil's.
func ourLookups(r *gsym.Reader, addrs []uint64) []string {
	out := make([]string, len(addrs))
	var res gsym.LookupResult
	for i, a := range addrs {
		var b []byte
		if err := r.LookupInto(&res, a); err != nil {
			b = gsym.AppendLookupError(nil, a, err)
		} else {
			b = res.AppendText(nil)
		}
		out[i] = strings.TrimSuffix(string(b), "\n")
	}
	return out
}

func compareLookups(t *testing.T, what string, addrs []uint64, got, want []string) {
	t.Helper()
	bad := 0
	for i := range addrs {
		if got[i] != want[i] {
			if bad < 10 {
				t.Errorf("%s: 0x%x:\n got: %s\nwant: %s", what, addrs[i], got[i], want[i])
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d lookups differ", what, bad, len(addrs))
	}
}

func openFixture(t testing.TB, name string) *gsym.Reader {
	r, err := gsym.Open(filepath.Join(fixtures, name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// TestReaderMatchesLLVM: LLVM's GSYM read by sprof answers as
// llvm-gsymutil does, for every function start, interior and end.
func TestReaderMatchesLLVM(t *testing.T) {
	tool := llvmGsymutil(t)
	total := 0
	for _, fx := range oracleFixtures {
		t.Run(fx.name, func(t *testing.T) {
			r := openFixture(t, fx.llvm)
			addrs := probeAddresses(t, r)
			total += len(addrs)
			want := llvmLookups(t, tool, filepath.Join(fixtures, fx.llvm), addrs)
			compareLookups(t, fx.llvm, addrs, ourLookups(r, addrs), want)
		})
	}
	t.Logf("%d addresses compared", total)
}

// TestConverterMatchesLLVM: the GSYM sprof writes from each binary, read
// by llvm-gsymutil and by sprof, answers as LLVM's own GSYM of it does.
//
// GSYM_ORACLE_BINARY=/path/to/binary adds a binary of your choice, which
// LLVM converts first (for checking large real programs by hand).
func TestConverterMatchesLLVM(t *testing.T) {
	tool := llvmGsymutil(t)
	fxs := slices.Clone(oracleFixtures)
	dir := fixtures
	if p := os.Getenv("GSYM_ORACLE_BINARY"); p != "" {
		dir = t.TempDir()
		if err := os.Symlink(p, filepath.Join(dir, "extra")); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(tool, "--quiet", "--num-threads=1", "--convert", p, "-o", filepath.Join(dir, "extra.llvm.gsym")).CombinedOutput()
		if err != nil {
			t.Fatalf("llvm-gsymutil --convert: %v\n%s", err, out)
		}
		fxs = []oracleFixture{{"extra", "extra", "extra.llvm.gsym", false}}
	}
	for _, fx := range fxs {
		if fx.merged {
			continue
		}
		t.Run(fx.name, func(t *testing.T) {
			c, st, err := ELF(filepath.Join(dir, fx.binary), Options{DebugDirs: []string{t.TempDir()}})
			if err != nil {
				t.Fatal(err)
			}
			if fx.binary == "debuglink" && st.DebugFile == "" {
				t.Fatal("separate debug file not found")
			}
			ours := filepath.Join(t.TempDir(), fx.binary+".gsym")
			if err := c.WriteFile(ours, gsym.EncodeOptions{ByteOrder: st.ByteOrder}); err != nil {
				t.Fatal(err)
			}
			llvm, err := gsym.Open(filepath.Join(dir, fx.llvm))
			if err != nil {
				t.Fatal(err)
			}
			defer llvm.Close()
			r, err := gsym.Open(ours)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if r.NumFunctions() != llvm.NumFunctions() {
				t.Errorf("%d functions, LLVM has %d", r.NumFunctions(), llvm.NumFunctions())
			}
			if !bytes.Equal(r.Header().UUID, llvm.Header().UUID) || r.Header().BaseAddress != llvm.Header().BaseAddress {
				t.Errorf("UUID %x base %#x, LLVM has %x %#x", r.Header().UUID, r.Header().BaseAddress, llvm.Header().UUID, llvm.Header().BaseAddress)
			}
			addrs := append(probeAddresses(t, llvm), probeAddresses(t, r)...)
			slices.Sort(addrs)
			addrs = slices.Compact(addrs)
			t.Logf("%d addresses", len(addrs))
			want := llvmLookups(t, tool, filepath.Join(dir, fx.llvm), addrs)
			compareLookups(t, "llvm-gsymutil on sprof's file", addrs, llvmLookups(t, tool, ours, addrs), want)
			compareLookups(t, "sprof on sprof's file", addrs, ourLookups(r, addrs), want)
		})
	}
}

// TestDumpMatchesLLVM: sprof's dump of LLVM's files is llvm-gsymutil's
// dump, line for line.
func TestDumpMatchesLLVM(t *testing.T) {
	tool := llvmGsymutil(t)
	for _, fx := range oracleFixtures {
		path := filepath.Join(fixtures, fx.llvm)
		want, err := exec.Command(tool, path).Output()
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if err := openFixture(t, fx.llvm).Dump(&got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want) {
			g, w := strings.Split(got.String(), "\n"), strings.Split(string(want), "\n")
			for i := range min(len(g), len(w)) {
				if g[i] != w[i] {
					t.Errorf("%s: line %d:\n got: %s\nwant: %s", fx.llvm, i+1, g[i], w[i])
					break
				}
			}
			t.Errorf("%s: dump differs (%d lines, llvm-gsymutil %d)", fx.llvm, len(g), len(w))
		}
	}
}

// TestBigEndianMatchesLLVM: LLVM's files transcoded by sprof to big-endian
// answer in llvm-gsymutil as the originals do (and as sprof's reader does).
func TestBigEndianMatchesLLVM(t *testing.T) {
	tool := llvmGsymutil(t)
	for _, name := range []string{"cinline.llvm.gsym", "cxx.llvm.gsym", "icf.llvm.gsym"} {
		llvm := openFixture(t, name)
		c, err := gsym.NewCreatorFrom(llvm)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Finalize(); err != nil {
			t.Fatal(err)
		}
		be := filepath.Join(t.TempDir(), "be.gsym")
		if err := c.WriteFile(be, gsym.EncodeOptions{ByteOrder: binary.BigEndian}); err != nil {
			t.Fatal(err)
		}
		addrs := probeAddresses(t, llvm)
		want := llvmLookups(t, tool, filepath.Join(fixtures, name), addrs)
		compareLookups(t, name+" big-endian in llvm-gsymutil", addrs, llvmLookups(t, tool, be, addrs), want)
		r, err := gsym.Open(be)
		if err != nil {
			t.Fatal(err)
		}
		compareLookups(t, name+" big-endian in sprof", addrs, ourLookups(r, addrs), want)
		r.Close()
	}
}
