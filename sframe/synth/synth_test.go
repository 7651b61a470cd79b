package synth

import (
	"bytes"
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/sprof/sprof/sframe"
)

const fixtures = "../../testdata/sframe/"

func synthFile(t testing.TB, path string) (*sframe.Table, Stats) {
	t.Helper()
	ef, err := elf.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) && os.Getenv("CI") != "true" {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	defer ef.Close()
	tab, st, err := FromELF(ef)
	if err != nil {
		t.Fatal(err)
	}
	return tab, st
}

// TestLibcCoverage synthesizes the tables of Debian's libc for amd64 (the
// host's) and aarch64 (the cross one), which have .eh_frame only, and
// wants nearly all of their code covered, every FDE readable and
// .eh_frame_hdr consistent.
func TestLibcCoverage(t *testing.T) {
	for _, path := range []string{"/lib/x86_64-linux-gnu/libc.so.6", "/usr/aarch64-linux-gnu/lib/libc.so.6"} {
		tab, st := synthFile(t, path)
		var b bytes.Buffer
		if err := st.WriteText(&b); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s:\n%s", path, b.String())
		if st.BadFDEs != 0 || !st.HdrChecked || st.FDEs < 3000 {
			t.Errorf("%s: %d bad FDEs, header checked %v, %d FDEs", path, st.BadFDEs, st.HdrChecked, st.FDEs)
		}
		if st.CoveredBytes*1000 < st.Bytes*999 {
			t.Errorf("%s: %d of %d bytes covered, want 99.9%%", path, st.CoveredBytes, st.Bytes)
		}
		// libc's clone and __restore_rt: a few rows only.
		if n := st.UnsupportedRows(); n == 0 || n > 20 {
			t.Errorf("%s: %d rows left out", path, n)
		}
		if st.Functions != len(tab.FDEs()) {
			t.Errorf("%s: %d functions in stats, %d in the table", path, st.Functions, len(tab.FDEs()))
		}
	}
}

// TestUnsupportedRows checks that the realigned stack of the FLEX fixture
// (CFA on r10, then expressions) is counted, not guessed.
func TestUnsupportedRows(t *testing.T) {
	tab, st := synthFile(t, fixtures+"flex-amd64-v3")
	if st.Unsupported[ReasonCFARegister] != 2 || st.Unsupported[ReasonCFAExpression] != 1 {
		t.Errorf("unsupported rows %v, want 2 on another register and 1 expression", st.Unsupported)
	}
	// _start keeps its first row, up to the realignment.
	r, ok := tab.Lookup(0x401000)
	if !ok || r.FDE.Size != 5 || r.Row.CFA.Off != 8 {
		t.Errorf("_start: %v %+v", ok, r)
	}
	if _, ok := tab.Lookup(0x401005); ok {
		t.Errorf("rule at 0x401005, where the CFA is r10")
	}
}

// TestDebugFrame synthesizes a binary whose own code has .debug_frame
// instead of .eh_frame (the crt objects keep theirs) and compares it with
// the SFrame gas wrote for the same source.
func TestDebugFrame(t *testing.T) {
	tab, st := synthFile(t, fixtures+"chain-amd64-debugframe")
	if st.DebugFrameFDEs == 0 || st.BadFDEs != 0 {
		t.Fatalf("%d FDEs from .debug_frame, %d bad: %v", st.DebugFrameFDEs, st.BadFDEs, st.Errors)
	}
	if len(tab.FDEs()) < st.DebugFrameFDEs {
		t.Errorf("%d functions for %d FDEs", len(tab.FDEs()), st.DebugFrameFDEs)
	}
}

// TestEncodedGolden encodes the tables of two fixtures in each SFrame
// version and wants what the readelf of the binutils release that reads
// that version printed for the section added to the binary
// (scripts/sframe-synth-fixtures.sh).
func TestEncodedGolden(t *testing.T) {
	for _, name := range []string{"chain-amd64-v1", "chain-arm64-v3"} {
		tab, _ := synthFile(t, fixtures+name)
		for v := sframe.Version1; v <= sframe.Version3; v++ {
			data, err := tab.Encode(v, 0)
			if err != nil {
				t.Fatal(err)
			}
			parsed, err := sframe.Parse(data, 0)
			if err != nil {
				t.Fatalf("%s V%d: %v", name, v, err)
			}
			var got bytes.Buffer
			if err := parsed.WriteText(&got); err != nil {
				t.Fatal(err)
			}
			golden := fixtures + name + ".synth-v" + string('0'+byte(v)) + ".readelf.txt"
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Bytes(), want) {
				t.Errorf("%s: our dump of the section differs from readelf's:\n%s", golden, got.String())
			}
		}
	}
}

// TestReadelfV1 adds the V1 encoding of synthesized tables to copies of
// binaries and has the host's readelf (binutils 2.40) print them.
func TestReadelfV1(t *testing.T) {
	for _, c := range []struct{ path, tools string }{
		{fixtures + "lua-amd64-v1", ""},
		{fixtures + "lua-arm64-v3", "aarch64-linux-gnu-"},
		{"/lib/x86_64-linux-gnu/libc.so.6", ""},
	} {
		tab, _ := synthFile(t, c.path)
		data, err := tab.Encode(sframe.Version1, 0)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		sec, out := filepath.Join(dir, "sframe"), filepath.Join(dir, "elf")
		if err := os.WriteFile(sec, data, 0o644); err != nil {
			t.Fatal(err)
		}
		run := func(tool string, args ...string) []byte {
			t.Helper()
			b, err := exec.Command(c.tools+tool, args...).Output()
			if err != nil {
				if _, lerr := exec.LookPath(c.tools + tool); lerr != nil && os.Getenv("CI") != "true" {
					t.Skip(lerr)
				}
				t.Fatalf("%s%s %q: %v", c.tools, tool, args, err)
			}
			return b
		}
		run("objcopy", "--remove-section=.sframe", "--add-section", ".sframe="+sec, c.path, out)
		readelf := run("readelf", "--sframe", out)
		parsed, err := sframe.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		var ours bytes.Buffer
		if err := parsed.WriteText(&ours); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(ours.Bytes(), readelf) || len(parsed.FDEs()) != len(tab.FDEs()) {
			t.Errorf("%s: readelf prints\n%.2000s\nwe\n%.2000s", c.path, readelf, ours.String())
		}
	}
}

// TestRoundTrip encodes a synthesized table in V3 and parses it back.
func TestRoundTrip(t *testing.T) {
	tab, _ := synthFile(t, fixtures+"lua-arm64-v3")
	data, err := tab.Encode(sframe.Version3, 0x1000)
	if err != nil {
		t.Fatal(err)
	}
	back, err := sframe.Parse(data, 0x1000)
	if err != nil || len(back.Errors) != 0 {
		t.Fatal(err, back.Errors)
	}
	if len(back.FDEs()) != len(tab.FDEs()) {
		t.Fatalf("%d FDEs back, want %d", len(back.FDEs()), len(tab.FDEs()))
	}
	for i := range tab.FDEs() {
		f, g := &tab.FDEs()[i], &back.FDEs()[i]
		if f.Start != g.Start || f.Size != g.Size || f.Info != g.Info || f.RepSize != g.RepSize {
			t.Fatalf("FDE %d: %+v, back %+v", i, f, g)
		}
		a, b := tab.Rows(f), back.Rows(g)
		if len(a) != len(b) {
			t.Fatalf("FDE %d: %d rows, back %d", i, len(a), len(b))
		}
		for j := range a {
			if a[j] != b[j] {
				t.Fatalf("FDE %d row %d: %+v, back %+v", i, j, a[j], b[j])
			}
		}
	}
}
