package main

import (
	"path/filepath"
	"testing"

	"github.com/sprof/sprof/internal/pychain"
	"github.com/sprof/sprof/internal/testenv"
)

// TestRecordPython records the fixture for 2 s at 499 Hz into a profile,
// and into a recording reported after the process is gone, and wants
// >= 95% of its samples to show the chain exactly with file:line (see
// pychain.Fixture.ChainOK), and some through json's C accelerator;
// below the bar it prints what --stats said of the Python frames.
func TestRecordPython(t *testing.T) {
	testenv.RequireRoot(t)
	fx := pychain.Load(t, "../..")
	for _, python := range pychain.Interpreters(t) {
		for _, ext := range []string{".pb.gz", ".sprof"} {
			t.Run(filepath.Base(python)+ext, func(t *testing.T) {
				dir := t.TempDir()
				cmd := startJIT(t, dir, python, fx.Path)
				out := filepath.Join(dir, "cpu"+ext)
				stats := recordCPU(t, cmd.Process.Pid, out, "--stats")
				if ext == ".sprof" {
					pb := filepath.Join(dir, "cpu.pb.gz")
					if code, _, errs := runSprof("report", out, "-o", pb); code != 0 {
						t.Fatalf("sprof report: exit %d\n%s", code, errs)
					}
					out = pb
				}
				var total, good, accelerated int64
				var bad []string
				for _, s := range parseProfile(t, out).Sample {
					total += s.Value[0]
					frames := pychain.RootFirst(s)
					ok, acc := fx.ChainOK(frames)
					if ok {
						good += s.Value[0]
					} else if len(bad) < 10 {
						bad = append(bad, pychain.Brief(frames))
					}
					if ok && acc {
						accelerated += s.Value[0]
					}
				}
				t.Logf("%d of %d samples show the chain, %d through json's accelerator; others like %q", good, total, accelerated, bad)
				if total < 40 {
					t.Errorf("only %d samples in 2 s of CPU time at 499 Hz", total)
				}
				if good*100 < total*95 {
					t.Errorf("%d of %d samples show the chain, want >= 95%%; sprof record --stats said:\n%s", good, total, stats)
				}
				if accelerated == 0 {
					t.Errorf("no sample shows the chain through json's C accelerator")
				}
			})
		}
	}
}
