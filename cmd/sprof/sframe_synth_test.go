package main

import (
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sprof/sprof/sframe"
)

// TestSFrameSynth synthesizes a fixture's table in each version and
// parses the section it wrote.
func TestSFrameSynth(t *testing.T) {
	out := filepath.Join(t.TempDir(), "sframe")
	for _, v := range []string{"1", "2", "3"} {
		code, stdout, stderr := runSprof("sframe", "synth", sframeFixtures+"chain-amd64-v1", "-o", out, "--version", v, "--addr", "0x1000")
		if code != 0 || !strings.Contains(stdout, "code covered: ") {
			t.Fatalf("V%s: exit %d, stdout %q, stderr %q", v, code, stdout, stderr)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		tab, err := sframe.Parse(data, 0x1000)
		if err != nil || len(tab.Errors) != 0 || tab.Header.Version != sframe.Version(v[0]-'0') || len(tab.FDEs()) < 8 {
			t.Errorf("V%s: %v, %v", v, err, tab)
		}
	}
	for _, args := range [][]string{
		{"sframe", "synth", sframeFixtures + "chain-amd64-v1"},
		{"sframe", "synth", "-o", out},
		{"sframe", "synth", sframeFixtures + "chain-amd64-v1", "-o", out, "--version", "4"},
		{"sframe", "synth", sframeFixtures + "chain-amd64-v1", "-o", out, "--addr", "x"},
	} {
		if code, _, _ := runSprof(args...); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
}

// TestSFrameSynthOutput reads what synth wrote with dump and lookup, which
// recognize a raw section by its magic, and writes it to standard output.
func TestSFrameSynthOutput(t *testing.T) {
	bin := sframeFixtures + "chain-amd64-v1"
	out := filepath.Join(t.TempDir(), "sframe")
	if code, _, errs := runSprof("sframe", "synth", bin, "-o", out, "--addr", "0x1000"); code != 0 {
		t.Fatalf("synth: exit %d: %s", code, errs)
	}
	// The synthesized table dumps as the binary's own, built by GNU as.
	code, fromRaw, errs := runSprof("sframe", "dump", out, "--addr", "0x1000")
	if code != 0 || !strings.Contains(fromRaw, "func idx [0]") {
		t.Fatalf("dump of the raw section: exit %d, %s\n%s", code, errs, fromRaw)
	}
	code, looked, errs := runSprof("sframe", "lookup", out, "--addr", "0x1000", "0x1139")
	if code != 0 || !strings.HasPrefix(looked, "0x1139: func ") {
		t.Errorf("lookup in the raw section: exit %d, %q %s", code, looked, errs)
	}
	code, stdout, errs := runSprof("sframe", "synth", bin, "-o", "-", "--addr", "0x1000")
	want, _ := os.ReadFile(out)
	if code != 0 || stdout != string(want) || !strings.Contains(errs, "to standard output") {
		t.Errorf("synth -o -: exit %d, %d bytes on stdout, want the %d of the file; stderr %q", code, len(stdout), len(want), errs)
	}
}

// TestSFrameSynthDamaged synthesizes from copies of a binary with each
// .eh_frame entry's length damaged: the other functions are kept. With
// every entry's damaged, nothing is left and synth fails.
func TestSFrameSynthDamaged(t *testing.T) {
	bin := sframeFixtures + "chain-amd64-v1"
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	eh := ef.Section(".eh_frame")
	// The entries' offsets in the file: CIE, the FDE of _start, CIE, the
	// PLT's FDE, ... (readelf --debug-dump=frames).
	var entries []uint64
	for off := eh.Offset; off < eh.Offset+eh.Size; off += 4 + uint64(binary.LittleEndian.Uint32(data[off:])) {
		entries = append(entries, off)
	}
	damage := func(name string, at ...int) string {
		bad := slices.Clone(data)
		for _, i := range at {
			binary.LittleEndian.PutUint32(bad[entries[i]:], 0xfffffff0)
		}
		path := filepath.Join(t.TempDir(), name)
		os.WriteFile(path, bad, 0o755)
		return path
	}
	code, stdout, errs := runSprof("sframe", "synth", damage("fde", 3), "-o", filepath.Join(t.TempDir(), "out"))
	if code != 0 || !strings.Contains(stdout, "FDEs: 7 (0 from .debug_frame), bad: 1") {
		t.Errorf("one FDE damaged: exit %d, want 0 and the other 7 FDEs:\n%s%s", code, stdout, errs)
	}
	// Both CIEs damaged: no FDE has the rules it starts from.
	none := filepath.Join(t.TempDir(), "none")
	code, _, errs = runSprof("sframe", "synth", damage("cies", 0, 2), "-o", none)
	if code != 1 || !strings.Contains(errs, "no function has unwind rows") {
		t.Errorf("CIEs damaged: exit %d, want 1 and an error saying nothing is left:\n%s", code, errs)
	}
	if _, err := os.Stat(none); err == nil {
		t.Errorf("synth wrote %s with nothing in it", none)
	}
}
