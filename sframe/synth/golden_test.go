package synth

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/sprof/sprof/sframe"
)

var update = flag.Bool("update", false, "rewrite the synthesized sections in testdata/sframe")

// TestSynthesizedSections keeps NAME.synth, the V3 encoding (at address 0)
// of the table synthesized for each fixture with a stack dump, current:
// package sframe's tests unwind those dumps with them.
func TestSynthesizedSections(t *testing.T) {
	bins, err := filepath.Glob(fixtures + "chain-*-v[123]")
	if err != nil || len(bins) != 6 {
		t.Fatal(bins, err)
	}
	for _, bin := range bins {
		tab, _ := synthFile(t, bin)
		got, err := tab.Encode(sframe.Version3, 0)
		if err != nil {
			t.Fatal(err)
		}
		golden := bin + ".synth"
		if *update {
			if err := os.WriteFile(golden, got, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from the synthesized section (run with -update if intended)", golden)
		}
	}
}
