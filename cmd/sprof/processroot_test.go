package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sprof/sprof/exporters"
	"github.com/sprof/sprof/internal/testenv"
)

// --process-root auto: the command name first in folded and SVG output of
// many programs (the host, a cgroup), nothing added for -p, a command, or
// formats with their own way to separate processes; an explicit value
// always wins.
func TestProcessRootDefault(t *testing.T) {
	self := strconv.Itoa(os.Getpid())
	for _, tc := range []struct {
		args []string
		want exporters.ProcessRoot
	}{
		{[]string{"-o", "x.folded"}, exporters.CommRoot},
		{[]string{"-o", "x.svg"}, exporters.CommRoot},
		{[]string{"-o", "x.txt", "--cgroup", "/sys/fs/cgroup"}, exporters.CommRoot},
		{[]string{"-o", "x.pb.gz"}, exporters.NoProcessRoot},
		{[]string{"-o", "x.speedscope.json"}, exporters.NoProcessRoot},
		{[]string{"-o", "x.folded", "-p", self}, exporters.NoProcessRoot},
		{[]string{"-o", "x.svg", "--", "true"}, exporters.NoProcessRoot},
		{[]string{"-o", "x.folded", "--process-root", "none"}, exporters.NoProcessRoot},
		{[]string{"-o", "x.folded", "--process-root", "comm-pid"}, exporters.CommPidRoot},
		{[]string{"-o", "x.pb.gz", "--process-root", "comm"}, exporters.CommRoot},
		{[]string{"-o", "x.svg", "-p", self, "--process-root", "auto"}, exporters.NoProcessRoot},
	} {
		o, err := parseRecord(&env{strings.NewReader(""), io.Discard, io.Discard}, tc.args)
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if o.export.ProcessRoot != tc.want {
			t.Errorf("%v: process root %v, want %v", tc.args, o.export.ProcessRoot, tc.want)
		}
	}
}

// svgTitle is the flame graph's title line.
var svgTitle = regexp.MustCompile(`<text id="title" [^>]*>([^<]*)</text>`)

// TestRecordSystemWideFlameGraphs records the host while the spin fixture
// runs: in folded output its stacks start with its command name; recorded
// with -p they start with spin's own outermost frame. The SVGs, whose
// frames come from the same aggregation, are titled with the host or the
// pid and the start.
func TestRecordSystemWideFlameGraphs(t *testing.T) {
	testenv.RequireRoot(t)
	spin := startSpin(t, "60")
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	record := func(name string, args ...string) string {
		t.Helper()
		out := filepath.Join(dir, name)
		if code, _, errs := runSprof(append([]string{"record", "-d", "1s", "-F", "199", "-o", out}, args...)...); code != 0 {
			t.Fatalf("record %v: exit %d\n%s", args, code, errs)
		}
		return out
	}
	spinRoots := func(path string) map[string]int {
		roots := map[string]int{}
		for stack, n := range checkFolded(t, path) {
			if strings.HasSuffix(stack, "main;a;b;c") {
				root, _, _ := strings.Cut(stack, ";")
				roots[root] += n
			}
		}
		return roots
	}
	pid := strconv.Itoa(spin.Process.Pid)
	own := spinRoots(record("pid.folded", "-p", pid))
	if len(own) == 0 || own["spin"] != 0 {
		t.Errorf("-p: spin's stacks start at %v, want its own frames, no process root", own)
	}
	// Other fixtures with a main;a;b;c chain (bpf's, when packages are
	// tested in parallel) may run too: their stacks start at their own
	// names. None may start at spin's own outermost frame.
	wide := spinRoots(record("host.folded"))
	if wide["spin"] == 0 {
		t.Errorf("system-wide: spin's stacks start at %v, want spin among them", wide)
	}
	for root := range own {
		if wide[root] != 0 {
			t.Errorf("system-wide: %d stacks start at %q, spin's own outermost frame, not at a command name (all: %v)", wide[root], root, wide)
		}
	}

	for _, tc := range []struct {
		name  string
		args  []string
		title string
	}{
		{"host.svg", nil, `^` + regexp.QuoteMeta(host) + `, \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$`},
		{"pid.svg", []string{"-p", pid}, `^pid ` + pid + ` on ` + regexp.QuoteMeta(host) + `, \d{4}-`},
	} {
		b, err := os.ReadFile(record(tc.name, tc.args...))
		if err != nil {
			t.Fatal(err)
		}
		svg := string(b)
		m := svgTitle.FindStringSubmatch(svg)
		if m == nil || !regexp.MustCompile(tc.title).MatchString(m[1]) {
			t.Errorf("%s: title %q, want it to match %s", tc.name, m, tc.title)
		}
	}
}

// TestReportProcessRoot reports a recording of a whole host (a Go build)
// as folded stacks: each stack starts with the command name of its
// process, as go tool pprof -tags lists the comm labels of the same report
// in pprof; with --pid, one process, no root is added.
func TestReportProcessRoot(t *testing.T) {
	const fixture = "../../testdata/cbf/gobuild.sprof"
	dir := t.TempDir()
	folded, pb := filepath.Join(dir, "all.folded"), filepath.Join(dir, "all.pb.gz")
	for _, out := range []string{folded, pb} {
		if code, _, errs := runSprof("report", fixture, "--symbolizer", "elf", "-o", out); code != 0 {
			t.Fatalf("report -o %s: exit %d\n%s", out, code, errs)
		}
	}
	tags, err := exec.Command(testenv.RequireTool(t, "go"), "tool", "pprof", "-tags", "-symbolize=none", pb).Output()
	if err != nil {
		t.Fatal(err)
	}
	_, commSection, _ := strings.Cut(string(tags), "comm: Total")
	commSection, _, _ = strings.Cut(commSection, "\n\n")
	comms := map[string]bool{}
	for _, l := range strings.Split(commSection, "\n")[1:] {
		if _, c, ok := strings.Cut(l, "): "); ok {
			comms[strings.ReplaceAll(strings.TrimSpace(c), " ", "_")] = true
		}
	}
	if len(comms) < 2 {
		t.Fatalf("pprof -tags lists comms %v; the fixture should hold several programs", comms)
	}
	for stack := range checkFolded(t, folded) {
		if root, _, _ := strings.Cut(stack, ";"); !comms[root] {
			t.Errorf("stack %.80q starts at %q, not at a comm pprof lists (%v)", stack, root, comms)
			break
		}
	}
	p := parseProfile(t, pb)
	pid, comm := samplePid(p.Sample[0]), p.Sample[0].Label["comm"][0]
	one := filepath.Join(dir, "one.folded")
	if code, _, errs := runSprof("report", fixture, "--symbolizer", "elf", "--pid", pid, "-o", one); code != 0 {
		t.Fatalf("report --pid %s: exit %d\n%s", pid, code, errs)
	}
	for stack := range checkFolded(t, one) {
		if strings.HasPrefix(stack, comm+";") {
			t.Errorf("report --pid %s: stack %.80q starts with a process root", pid, stack)
			break
		}
	}
}
