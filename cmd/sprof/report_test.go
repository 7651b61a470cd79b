package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sprof/sprof/exporters"
)

// TestReportRoundTrip records a fixture whose stacks are known into a
// recording, reports it as pprof, and compares the profile with the one
// `sprof record -o x.pb.gz` gives for the same program.
func TestReportRoundTrip(t *testing.T) {
	chain := []string{"c", "b", "a", "main"}
	direct, _ := recordProfile(t, "-F", "499", "--", "../../testdata/e2e/spin", "2")
	directShare, directTotal := chainShare(t, direct, "spin", chain)

	dir := t.TempDir()
	rec := filepath.Join(dir, "spin.sprof")
	if code, _, errs := runSprof("record", "-F", "499", "-o", rec, "--", "../../testdata/e2e/spin", "2"); code != 0 {
		t.Fatalf("record: exit %d\n%s", code, errs)
	}
	out := filepath.Join(dir, "spin.pb.gz")
	code, _, errs := runSprof("report", rec, "-o", out)
	if code != 0 {
		t.Fatalf("report: exit %d\n%s", code, errs)
	}
	p := parseProfile(t, out)
	if err := exporters.CheckPprof(p); err != nil {
		t.Errorf("reported profile: %v", err)
	}
	share, total := chainShare(t, p, "spin", chain)
	if share < 0.99 || directShare < 0.99 {
		t.Errorf("%.2f%% of reported samples have the chain %v, %.2f%% of sprof record -o x.pb.gz's; want both ≥ 99%%", 100*share, chain, 100*directShare)
	}
	// Each run gets the CPU share the host leaves it, so counts are
	// compared with the rate, not with each other: 2 s at 499 Hz.
	for _, n := range []int64{total, directTotal} {
		if n < 300 || n > 1100 {
			t.Errorf("%d samples of spin in 2 s at 499 Hz (report %d, record %d)", n, total, directTotal)
		}
	}
	var sum int64
	for _, s := range p.Sample {
		sum += s.Value[0]
	}
	if !strings.Contains(errs, fmt.Sprintf("sprof report: %d of %d samples", sum, sum)) {
		t.Errorf("the profile holds %d samples; report said %s", sum, errs)
	}
}

// TestReportFilters reports the committed recording (perf samples of a Go
// build) for one program, for a time window, and cut short.
func TestReportFilters(t *testing.T) {
	const fixture = "../../testdata/cbf/gobuild.sprof"
	dir := t.TempDir()
	out := filepath.Join(dir, "compile.pb.gz")
	code, _, errs := runSprof("report", fixture, "--comm", "compile", "--from", "5", "--to", "15s", "-o", out)
	if code != 0 {
		t.Fatalf("report: exit %d\n%s", code, errs)
	}
	if !strings.Contains(errs, "kernel frames stay unnamed: recorded on kernel 6.18") {
		t.Errorf("report does not say why kernel frames are unnamed:\n%s", errs)
	}
	p := parseProfile(t, out)
	var n int64
	for _, s := range p.Sample {
		if c := s.Label["comm"]; len(c) != 1 || c[0] != "compile" {
			t.Fatalf("a sample of %q", c)
		}
		n += s.Value[0]
	}
	if n == 0 || !strings.Contains(errs, "sprof report: "+strconv.FormatInt(n, 10)+" of 735 samples") {
		t.Errorf("%d samples of compile in the window; report said:\n%s", n, errs)
	}
	if p.DurationNanos != 10e9 {
		t.Errorf("duration %d ns; want the 10 s window", p.DurationNanos)
	}

	data, err := os.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(dir, "cut.sprof")
	if err := os.WriteFile(cut, data[:20000], 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errs = runSprof("report", cut, "-o", filepath.Join(dir, "cut.folded"))
	if code != 0 || !strings.Contains(errs, "is damaged from offset 19409") {
		t.Errorf("report of a cut recording: exit %d\n%s", code, errs)
	}

	for _, args := range [][]string{
		{"report"},
		{"report", fixture, "--from", "soon"},
		{"report", fixture, "--from", "10s", "--to", "5s"},
		{"report", fixture, "--from", "2000-01-01T00:00:00Z"},
		{"report", fixture, "-o", "x.sprof"},
	} {
		if code, _, _ := runSprof(args...); code != 2 {
			t.Errorf("%q: exit %d; want 2", args, code)
		}
	}
}
