package main

import (
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"golang.org/x/sys/unix"

	"github.com/sprof/sprof/cbf"
	"github.com/sprof/sprof/cbf/recording"
	"github.com/sprof/sprof/collector/container/containertest"
	"github.com/sprof/sprof/exporters"
	"github.com/sprof/sprof/internal/testenv"
	"github.com/sprof/sprof/symbolize/buildid"
)

// TestReportRoundTrip records a fixture whose stacks are known into a
// recording, reports it as pprof, and compares the profile with the one
// `sprof record -o x.pb.gz` gives for the same program.
func TestReportRoundTrip(t *testing.T) {
	chain := []string{"c", "b", "a", "main"}
	before := childCPU(t)
	direct, _ := recordProfile(t, "-F", "499", "--", "../../testdata/e2e/spin", "2")
	directCPU := childCPU(t) - before
	directShare, directTotal := chainShare(t, direct, "spin", chain)

	dir := t.TempDir()
	rec := filepath.Join(dir, "spin.sprof")
	before = childCPU(t)
	if code, _, errs := runSprof("record", "-F", "499", "-o", rec, "--", "../../testdata/e2e/spin", "2"); code != 0 {
		t.Fatalf("record: exit %d\n%s", code, errs)
	}
	recordedCPU := childCPU(t) - before
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
	// Starting spin (exec, the dynamic loader) takes a few ms of CPU
	// whatever share of a CPU the host leaves its loop: 5 samples.
	for _, run := range []struct {
		name  string
		share float64
		n     int64
	}{{"report", share, total}, {"record -o x.pb.gz", directShare, directTotal}} {
		if miss := float64(run.n) * (1 - run.share); miss > float64(run.n)/100+5 {
			t.Errorf("%s: %.0f of %d samples lack the chain %v; want at most 1%% and the 5 of spin's start", run.name, miss, run.n, chain)
		}
	}
	// Each run gets the CPU share the host leaves it, so each count is
	// compared with the CPU time its spin used, which the kernel counts
	// for the children a process waited for: 499 samples per CPU second.
	for _, run := range []struct {
		name string
		n    int64
		cpu  time.Duration
	}{{"report", total, recordedCPU}, {"record -o x.pb.gz", directTotal, directCPU}} {
		want := run.cpu.Seconds() * 499
		if float64(run.n) < 0.8*want-10 || float64(run.n) > 1.2*want+10 {
			t.Errorf("%s: %d samples of spin, which used %v of CPU: want %.0f at 499 Hz", run.name, run.n, run.cpu, want)
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

// childCPU is the CPU time of the children this process has waited for.
func childCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_CHILDREN, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
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
	if code != 0 || !strings.Contains(errs, "cut.sprof: cut short at offset 19768") {
		t.Errorf("report of a cut recording: exit %d\n%s", code, errs)
	}

	for _, args := range [][]string{
		{"report"},
		{"report", fixture, "--from", "soon"},
		{"report", fixture, "--from", "10s", "--to", "5s"},
		{"report", fixture, "--from", "2000-01-01T00:00:00Z"},
		{"report", fixture, "-o", "x.sprof"},
		{"report", fixture, "--labels", "cpu"},
		{"report", fixture, "--process-root", "pid"},
	} {
		if code, _, _ := runSprof(args...); code != 2 {
			t.Errorf("%q: exit %d; want 2", args, code)
		}
	}
}

// cinline is a C fixture built at -O2 with DWARF, in which mix and mix2
// (inl.h) are inlined into hash, and add and twice into fill; its text is
// at file offset and address 0x1000.
const cinline = "../../testdata/gsym/cinline"

// writeCinlineRecording writes a recording of one process running cinline,
// loaded at load, with one sample at each of the addresses.
func writeCinlineRecording(t *testing.T, path string, load uint64, addrs []uint64) {
	t.Helper()
	bin, err := filepath.Abs(cinline)
	if err != nil {
		t.Fatal(err)
	}
	id, err := buildid.File(bin)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := hex.DecodeString(id)
	m, err := cbf.NewImageMap("", cbf.Word64, []cbf.Image{{Path: bin, BuildID: raw, Base: load + 0x1000, EndOfText: load + 0x12ad, TextOffset: 0x1000}})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	start := time.Now().Add(-time.Minute)
	w, err := recording.NewWriter(f, recording.Options{Host: "h", Kernel: "recorded-elsewhere", Arch: "x86_64", Frequency: 99, Start: start})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Process(start, 300, "cinline", m); err != nil {
		t.Fatal(err)
	}
	for i, a := range addrs {
		if err := w.Sample(start.Add(time.Duration(i)*time.Millisecond), 300, 300, 0, "cinline", []uint64{load + a}, nil, 0, 1); err != nil {
			t.Fatal(err)
		}
		if i%50 == 49 { // a chunk of samples each 50, as each second
			w.Flush()
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestReportSymbolizers reports a recording of a binary with DWARF through
// each symbolizer and compares every location's inline frames — function,
// file and line, innermost first — with llvm-symbolizer's for the same
// address. With --symbolizer gsym (the default) the binary's GSYM file
// lands in --cache-dir.
func TestReportSymbolizers(t *testing.T) {
	llvm := testenv.RequireTool(t, "llvm-symbolizer-22")
	const load = 0x555555554000
	// PCs in hash under mix2 and mix (inl.h), and in fill under twice
	// and add.
	addrs := []uint64{0x1215, 0x1278, 0x1280}
	dir := t.TempDir()
	rec := filepath.Join(dir, "cinline.sprof")
	writeCinlineRecording(t, rec, load, addrs)

	var args []string
	for _, a := range addrs {
		args = append(args, fmt.Sprintf("0x%x", a))
	}
	out, err := exec.Command(llvm, append([]string{"--inlining", "--no-demangle", "--relative-address", "--obj=" + cinline}, args...)...).Output()
	if err != nil {
		t.Fatalf("llvm-symbolizer: %v", err)
	}
	// One block per address: function and file:line:column lines.
	var want [][]string
	for _, block := range strings.Split(strings.TrimSpace(string(out)), "\n\n") {
		lines := strings.Split(block, "\n")
		var frames []string
		for i := 0; i+1 < len(lines); i += 2 {
			fileLine := lines[i+1][:strings.LastIndexByte(lines[i+1], ':')]
			frames = append(frames, lines[i]+" "+fileLine)
		}
		want = append(want, frames)
	}
	if len(want) != len(addrs) {
		t.Fatalf("llvm-symbolizer answered %d addresses of %d:\n%s", len(want), len(addrs), out)
	}

	for _, kind := range []string{"gsym", "elf"} {
		t.Run(kind, func(t *testing.T) {
			cache := filepath.Join(dir, "cache-"+kind)
			pb := filepath.Join(dir, kind+".pb.gz")
			code, _, errs := runSprof("report", rec, "--symbolizer", kind, "--cache-dir", cache, "-o", pb)
			if code != 0 {
				t.Fatalf("report: exit %d\n%s", code, errs)
			}
			p := parseProfile(t, pb)
			inline := false
			for _, l := range p.Location {
				var got []string
				for _, ln := range l.Line {
					got = append(got, fmt.Sprintf("%s %s:%d", ln.Function.Name, ln.Function.Filename, ln.Line))
				}
				i := slices.Index(addrs, l.Address-load)
				if i < 0 {
					t.Fatalf("a location at 0x%x", l.Address)
				}
				if !slices.Equal(got, want[i]) {
					t.Errorf("0x%x: %q; llvm-symbolizer says %q", addrs[i], got, want[i])
				}
				inline = inline || len(l.Line) > 1
			}
			m := p.Mapping[0]
			if len(p.Location) != len(addrs) || !inline || !m.HasFunctions || !m.HasFilenames || !m.HasLineNumbers || !m.HasInlineFrames {
				t.Errorf("%d locations, inline frames %v, mapping %+v", len(p.Location), inline, m)
			}
			ents, _ := os.ReadDir(filepath.Join(cache, "gsym"))
			if (kind == "gsym") != (len(ents) > 0) {
				t.Errorf("--symbolizer %s left %d files in the GSYM cache", kind, len(ents))
			}
		})
	}
	if code, _, _ := runSprof("report", rec, "--symbolizer", "dwarf"); code != 2 {
		t.Errorf("--symbolizer dwarf: exit %d; want 2", code)
	}

	// The labels and the root frame are the caller's choice.
	pb := filepath.Join(dir, "labels.pb.gz")
	if code, _, errs := runSprof("report", rec, "--labels", "pid", "--process-root", "comm-pid", "-o", pb); code != 0 {
		t.Fatalf("report: exit %d\n%s", code, errs)
	}
	for _, s := range parseProfile(t, pb).Sample {
		root := s.Location[len(s.Location)-1].Line[0].Function.Name
		if len(s.Label) != 0 || len(s.NumLabel) != 1 || len(s.NumLabel["pid"]) != 1 || root != "cinline-300" {
			t.Errorf("labels %v %v, root frame %q; want pid only and cinline-300", s.Label, s.NumLabel, root)
		}
	}
}

// TestRecordContainer runs a program that enters a container's cgroup and
// then execs, as runtimes start a container's program, and expects its
// samples labelled with the container's ID both in the profile `sprof
// record` writes and in the one `sprof report` makes of a recording. The
// direct recording is made with --labels and --process-root as well,
// which must leave only those labels and put the container's frame above
// the command's at the root.
func TestRecordContainer(t *testing.T) {
	testenv.RequireRoot(t)
	cg := containertest.New(t)
	spin, err := filepath.Abs("../../testdata/e2e/spin")
	if err != nil {
		t.Fatal(err)
	}
	command := []string{"--", "sh", "-c", "echo $$ > " + cg.Procs() + " && exec " + spin + " 1"}
	dir := t.TempDir()
	rec := filepath.Join(dir, "spin.sprof")
	if code, _, errs := runSprof(append([]string{"record", "-F", "499", "-o", rec}, command...)...); code != 0 {
		t.Fatalf("record: exit %d\n%s", code, errs)
	}
	reported := filepath.Join(dir, "spin.pb.gz")
	if code, _, errs := runSprof("report", rec, "-o", reported); code != 0 {
		t.Fatalf("report: exit %d\n%s", code, errs)
	}
	direct, _ := recordProfile(t, append([]string{"-F", "499", "--labels", "comm,container_id", "--process-root", "container-comm"}, command...)...)
	for name, p := range map[string]*profile.Profile{"record -o x.sprof, report": parseProfile(t, reported), "record -o x.pb.gz": direct} {
		var in, out int64
		for _, s := range p.Sample {
			if c := s.Label["comm"]; len(c) != 1 || c[0] != "spin" {
				continue
			}
			if id := s.Label["container_id"]; len(id) == 1 && id[0] == cg.ID {
				in += s.Value[0]
			} else {
				out += s.Value[0]
			}
		}
		// A loaded host leaves spin little CPU: the count is not the point.
		if in < 10 || out > in/100 {
			t.Errorf("%s: %d samples of spin in container %.12s, %d outside it", name, in, cg.ID, out)
		}
	}
	wantRoot := []string{"[container " + cg.ID[:12] + "]", "spin"}
	for _, s := range direct.Sample {
		for k := range s.Label {
			if k != "comm" && k != "container_id" {
				t.Fatalf("record --labels comm,container_id: a sample labelled %s", k)
			}
		}
		if c := s.Label["comm"]; len(c) != 1 || c[0] != "spin" || len(s.Location) < 2 {
			continue
		}
		var root []string
		for _, l := range s.Location[len(s.Location)-2:] {
			root = append([]string{l.Line[0].Function.Name}, root...)
		}
		if !slices.Equal(root, wantRoot) {
			t.Fatalf("record --process-root container-comm: a sample of spin rooted at %q; want %q", root, wantRoot)
		}
	}
}

// TestReportEmpty: a report with no sample in it says why, exits 1 and
// leaves the output path alone.
func TestReportEmpty(t *testing.T) {
	const fixture = "../../testdata/cbf/gobuild.sprof"
	dir := t.TempDir()
	out := filepath.Join(dir, "x.folded")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--comm", "nosuchprogram"}, "no samples to report: none of its 735 samples, taken from the start to 19.578s, matches --comm nosuchprogram; wrote nothing"},
		{[]string{"--from", "1h"}, "matches --from 1h"},
		{[]string{"-p", "1,2"}, "matches --pid 1,2"},
	} {
		code, _, errs := runSprof(append([]string{"report", fixture, "-o", out}, tt.args...)...)
		if code != 1 || !strings.Contains(errs, tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want 1 and %q", tt.args, code, errs, tt.want)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%v: an empty profile was written", tt.args)
		}
	}
}

// TestReportDamagedMiddle reports a recording with a byte damaged in the
// middle: the chunks after it are reported, and the loss is counted.
func TestReportDamagedMiddle(t *testing.T) {
	dir := t.TempDir()
	rec := filepath.Join(dir, "r.sprof")
	var addrs []uint64
	for range 200 {
		addrs = append(addrs, 0x1215)
	}
	writeCinlineRecording(t, rec, 0x555555554000, addrs)
	data, err := os.ReadFile(rec)
	if err != nil {
		t.Fatal(err)
	}
	whole := len(data)
	data[whole/2] ^= 0xff
	bad := filepath.Join(dir, "bad.sprof")
	os.WriteFile(bad, data, 0o644)
	code, _, errs := runSprof("report", bad, "--symbolizer", "elf", "-o", filepath.Join(dir, "x.folded"))
	m := regexp.MustCompile(`bad.sprof: (\d+) of 200 samples lost to damage at offset (\d+) `).FindStringSubmatch(errs)
	if code != 0 || m == nil {
		t.Fatalf("exit %d; want 0 and the samples lost to damage counted:\n%s", code, errs)
	}
	lost, _ := strconv.Atoi(m[1])
	if lost == 0 || lost >= 200 || !strings.Contains(errs, fmt.Sprintf("sprof report: %d of %d samples", 200-lost, 200-lost)) {
		t.Errorf("%d samples lost; want some, not all, and the rest reported:\n%s", lost, errs)
	}
}
