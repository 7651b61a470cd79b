package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sprof/sprof/internal/testenv"
)

// TestRecordDeletedBinaries: copies of a short-lived program, each run
// once and deleted at once, as a build runs its steps and `go test` its
// test binaries. Every copy's samples are named after its function,
// though its file is gone long before the profile is built, and pprof,
// the oracle, reads the profile without trying to symbolize what sprof
// already did (no "Local symbolization failed").
func TestRecordDeletedBinaries(t *testing.T) {
	testenv.RequireRoot(t)
	src, err := filepath.Abs("../../testdata/e2e/shortlived")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "cpu.pb.gz")
	script := `for i in 1 2 3 4; do cp "$1" "$2/copy$i" && "$2/copy$i"; rm -f "$2/copy$i"; done`
	if code, _, errs := runSprof("record", "-F", "997", "-o", out, "--", "sh", "-c", script, "sh", src, dir); code != 0 {
		t.Fatalf("sprof record: exit %d\n%s", code, errs)
	}
	p := parseProfile(t, out)
	named := map[string]bool{}
	for _, s := range p.Sample {
		comm := s.Label["comm"]
		if len(comm) == 0 || !strings.HasPrefix(comm[0], "copy") {
			continue
		}
		named[comm[0]] = named[comm[0]] || strings.Contains(strings.Join(names(s), ";"), "shortlived_work")
		for _, loc := range s.Location {
			if m := loc.Mapping; strings.HasPrefix(filepath.Base(m.File), "copy") && !m.HasFunctions {
				t.Errorf("mapping %s not marked as symbolized", m.File)
			}
		}
	}
	for _, c := range []string{"copy1", "copy2", "copy3", "copy4"} {
		if !named[c] {
			t.Errorf("no sample of %s names shortlived_work (named: %v)", c, named)
		}
	}
	pprof := exec.Command("go", "tool", "pprof", "-top", out)
	msg, err := pprof.CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof: %v\n%s", err, msg)
	}
	if strings.Contains(string(msg), "Local symbolization failed") {
		t.Errorf("pprof tried to symbolize again:\n%s", msg)
	}
}
