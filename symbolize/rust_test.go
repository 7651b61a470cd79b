package symbolize

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sprof/sprof/stacks"
)

// TestRustDemangling symbolizes every function of the Rust fixtures, built
// with rustc's legacy and v0 manglings (scripts/symbolize-fixtures.sh), and
// checks the names against demanglers no one here wrote: LLVM's for v0 and
// binutils' c++filt for legacy.
func TestRustDemangling(t *testing.T) {
	cases := []struct {
		fixture, demangler string
		// want lists names the fixture must yield, proof that the
		// mangling really is the one the case is about.
		want []string
	}{
		{"rust-legacy", "c++filt", []string{
			"rustnames::geometry::nested::größe",
			"<rustnames::geometry::Rect<T> as rustnames::geometry::Shape>::area",
		}},
		{"rust-v0", llvmCxxfilt, []string{
			"rustnames::geometry::nested::größe",
			"rustnames::apply::<rustnames::_start::{closure#0}>",
			"<rustnames::geometry::Rect<u8> as rustnames::geometry::Shape>::area",
			"rustnames::total::<rustnames::geometry::Square>",
		}},
	}
	for _, c := range cases {
		t.Run(c.fixture, func(t *testing.T) {
			needTool(t, c.demangler)
			path := fixture(c.fixture)
			loads := readelfLoads(t, path)
			var raws []string
			var addrs []uint64
			for _, line := range strings.Split(run(t, "", "nm", "--defined-only", path), "\n") {
				f := strings.Fields(line)
				if len(f) != 3 || (f[1] != "t" && f[1] != "T") || !mangled(f[2]) {
					continue
				}
				addr, err := strconv.ParseUint(f[0], 16, 64)
				if err != nil {
					t.Fatalf("nm line %q: %v", line, err)
				}
				raws = append(raws, f[2])
				addrs = append(addrs, addr)
			}
			if len(raws) < 6 {
				t.Fatalf("nm lists %d mangled functions in %s, want the fixture's 6 or more", len(raws), path)
			}
			oracle := strings.Split(strings.TrimSuffix(run(t, strings.Join(raws, "\n")+"\n", c.demangler), "\n"), "\n")
			if len(oracle) != len(raws) {
				t.Fatalf("%s returned %d names for %d", c.demangler, len(oracle), len(raws))
			}

			s := NewELF(Options{DebugDirs: []string{t.TempDir()}})
			got := map[string]bool{}
			var frames []stacks.Frame
			for i, raw := range raws {
				off, ok := fileOffset(loads, addrs[i])
				if !ok {
					t.Fatalf("%s at %#x is in no executable segment", raw, addrs[i])
				}
				var err error
				if frames, err = s.Symbolize(frames[:0], Binary{Path: path}, off); err != nil {
					t.Fatal(err)
				}
				if len(frames) != 1 {
					t.Errorf("%s: %d frames, want 1", raw, len(frames))
					continue
				}
				want := legacyOracle(oracle[i])
				if f := frames[0]; f.Function != want || f.SystemName != raw {
					t.Errorf("%s: function %q (system name %q), %s says %q", raw, f.Function, f.SystemName, c.demangler, want)
				}
				got[frames[0].Function] = true
			}
			for _, name := range c.want {
				if !got[name] {
					t.Errorf("no function named %q among %d", name, len(got))
				}
			}
			t.Logf("%d functions named as %s names them", len(raws), c.demangler)
		})
	}
}

const llvmCxxfilt = "llvm-cxxfilt-22"

var (
	// legacyHash is the hash a legacy Rust name ends in, which
	// demanglers print and profilers (perf, pprof, ours) leave out.
	legacyHash = regexp.MustCompile(`::h[0-9a-f]{16}$`)
	// legacyChar is a non-ASCII character in a legacy Rust name
	// ("$uf6$" for ö), which c++filt 2.40 leaves as it is.
	legacyChar = regexp.MustCompile(`\$u([0-9a-f]{1,6})\$`)
)

// legacyOracle turns c++filt's spelling of a legacy Rust name into the
// one profilers show; other names pass unchanged.
func legacyOracle(name string) string {
	name = legacyHash.ReplaceAllString(name, "")
	return legacyChar.ReplaceAllStringFunc(name, func(m string) string {
		r, err := strconv.ParseUint(legacyChar.FindStringSubmatch(m)[1], 16, 32)
		if err != nil {
			return m
		}
		return string(rune(r))
	})
}
