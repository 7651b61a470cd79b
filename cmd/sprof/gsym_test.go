package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const gsymFixtures = "../../testdata/gsym"

// TestGsymCommands converts a fixture, looks addresses up in both of the
// CLI's input forms, and dumps the file.
func TestGsymCommands(t *testing.T) {
	out := filepath.Join(t.TempDir(), "cinline.gsym")
	code, _, stderr := runSprof("gsym", "convert", filepath.Join(gsymFixtures, "cinline"), "-o", out)
	if code != 0 || !strings.Contains(stderr, "Loaded 5 functions from DWARF.") {
		t.Fatalf("convert: exit %d, stderr %q", code, stderr)
	}
	want := "0x00000000000011e8: add + 8 @ /src/cinline.c:11 [inlined]\n" +
		"                    twice + 8 @ /src/cinline.c:15 [inlined]\n" +
		"                    foo + 8 @ /src/cinline.c:19\n" +
		"0x0000000000000010: error: address 0x10 is not in GSYM\n"
	code, stdout, _ := runSprof("gsym", "lookup", out, "0x11e8", "0x10")
	if code != 0 || stdout != "Looking up addresses in \""+out+"\":\n"+want {
		t.Errorf("lookup: exit %d, output %q", code, stdout)
	}
	var o, e bytes.Buffer
	in := strings.NewReader("0x11e8 " + out + "\n0x10 " + out + "\n")
	code = run(&env{in, &o, &e}, []string{"gsym", "lookup", "--addresses-from-stdin"})
	if code != 0 || o.String() != strings.Replace(want, "foo + 8 @ /src/cinline.c:19\n", "foo + 8 @ /src/cinline.c:19\n\n", 1)+"\n" {
		t.Errorf("lookup --addresses-from-stdin: exit %d, output %q, stderr %q", code, o.String(), e.String())
	}
	code, stdout, _ = runSprof("gsym", "dump", out)
	if code != 0 || !strings.Contains(stdout, "Version      = 0x0001") || !strings.Contains(stdout, "twice called from /src/cinline.c:19") {
		t.Errorf("dump: exit %d, output %.300q", code, stdout)
	}
}

func TestGsymConvertVersion2AndBreakpad(t *testing.T) {
	out := filepath.Join(t.TempDir(), "hand.gsym")
	code, _, stderr := runSprof("gsym", "convert", "hand", "--breakpad", filepath.Join(gsymFixtures, "hand.sym"), "--output-version", "2", "-o", out)
	if code != 0 {
		t.Fatalf("convert: exit %d, stderr %q", code, stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil || len(b) < 6 || b[4] != 2 {
		t.Fatalf("output is not version 2: %v", err)
	}
	code, stdout, _ := runSprof("gsym", "lookup", out, "0x1012")
	if code != 0 || !strings.Contains(stdout, "inner helper + 2 @ /src/main.c:11 [inlined]") {
		t.Errorf("lookup: exit %d, output %q", code, stdout)
	}
}

func TestGsymUsage(t *testing.T) {
	for _, args := range [][]string{
		{"gsym"}, {"gsym", "frob"}, {"gsym", "convert"}, {"gsym", "convert", "x", "--output-version", "3"},
		{"gsym", "lookup", "f.gsym"}, {"gsym", "lookup", "f.gsym", "zz"}, {"gsym", "dump"},
	} {
		if code, _, _ := runSprof(args...); code != 2 {
			t.Errorf("sprof %v: exit %d, want 2", args, code)
		}
	}
}
