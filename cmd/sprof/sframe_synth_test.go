package main

import (
	"os"
	"path/filepath"
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
