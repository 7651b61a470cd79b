package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const sframeFixtures = "../../testdata/sframe/"

// TestSFrameDump checks that `sprof sframe dump` prints what readelf
// --sframe printed for every committed fixture (each version's golden from
// the binutils release that wrote it), and that --json is valid JSON.
func TestSFrameDump(t *testing.T) {
	goldens, err := filepath.Glob(sframeFixtures + "*.readelf")
	if err != nil || len(goldens) < 15 {
		t.Fatalf("%d readelf goldens in %s, want the 15 fixtures' (%v)", len(goldens), sframeFixtures, err)
	}
	for _, golden := range goldens {
		name := strings.TrimSuffix(filepath.Base(golden), ".readelf")
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatal(err)
		}
		code, out, errOut := runSprof("sframe", "dump", sframeFixtures+name)
		if code != 0 || out != string(want) {
			t.Errorf("%s: exit %d, stderr %q, output differs from readelf:\n%s", name, code, errOut, out)
		}
		code, out, _ = runSprof("sframe", "dump", "--json", sframeFixtures+name)
		var v struct {
			Functions []struct{ PC string } `json:"functions"`
		}
		if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || len(v.Functions) == 0 {
			t.Errorf("%s --json: exit %d, %v, %d functions", name, code, err, len(v.Functions))
		}
	}
}

func TestSFrameLookup(t *testing.T) {
	code, out, _ := runSprof("sframe", "lookup", sframeFixtures+"asm-amd64-v3", "0x401005", "0x10")
	want := "0x401005: func 0x401000 size 8, row +4 cfa=fp+16 ra=*(cfa-8) fp=*(cfa-16)\n" +
		"0x10: no rule (no function, or before its first row)\n"
	if code != 0 || out != want {
		t.Errorf("exit %d, output\n%s\nwant\n%s", code, out, want)
	}
}

func TestSFrameUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"sframe"},
		{"sframe", "frob"},
		{"sframe", "dump"},
		{"sframe", "lookup", sframeFixtures + "asm-amd64-v3"},
		{"sframe", "lookup", sframeFixtures + "asm-amd64-v3", "zz"},
	} {
		if code, _, errOut := runSprof(args...); code != 2 || !strings.Contains(errOut, "sprof sframe:") {
			t.Errorf("%q: exit %d, stderr %q; want a usage error", args, code, errOut)
		}
	}
	if code, _, errOut := runSprof("sframe", "dump", "/nonexistent"); code != 1 || errOut == "" {
		t.Errorf("missing file: exit %d, stderr %q", code, errOut)
	}
}
