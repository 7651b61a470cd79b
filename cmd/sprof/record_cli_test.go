package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sprof/sprof/cbf/recording"
	"github.com/sprof/sprof/exporters"
	"github.com/sprof/sprof/internal/testenv"
)

// summaryLine is the one line sprof record prints when it has written its
// output: duration, samples, lost samples, processes, output path.
var summaryLine = regexp.MustCompile(`(?m)^sprof: recorded (\d+\.\d)s, (\d+) samples?, (\d+) lost, (\d+) process(?:es)?; wrote (\S+) \((\w+)\)$`)

// summary checks stderr for the summary line naming out and returns its
// duration and sample count.
func summary(t *testing.T, stderr, out string) (secs float64, samples int) {
	t.Helper()
	m := summaryLine.FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("no summary line on stderr:\n%s", stderr)
	}
	if m[5] != out {
		t.Errorf("summary names %s, want %s", m[5], out)
	}
	secs, _ = strconv.ParseFloat(m[1], 64)
	samples, _ = strconv.Atoi(m[2])
	return secs, samples
}

// checkPprofFile reads a profile with the pprof library (which runs
// CheckValid), sprof's own stricter checks, and `go tool pprof -raw`.
func checkPprofFile(t *testing.T, path string) {
	t.Helper()
	p := parseProfile(t, path)
	if err := exporters.CheckPprof(p); err != nil {
		t.Errorf("%s: %v", path, err)
	}
	raw, err := exec.Command("go", "tool", "pprof", "-raw", path).CombinedOutput()
	if err != nil || !strings.Contains(string(raw), "Samples:") || !strings.Contains(string(raw), "Mappings") {
		t.Errorf("go tool pprof -raw %s: %v\n%.2000s", path, err, raw)
	}
}

// foldedLine is a line of folded stacks: frames root first, a space, a count.
var foldedLine = regexp.MustCompile(`^[^;\n]+(;[^;\n]+)* [1-9][0-9]*$`)

// checkFolded checks every line of a folded file and returns the stacks
// with their counts.
func checkFolded(t *testing.T, path string) map[string]int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	stacks := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if !foldedLine.MatchString(sc.Text()) {
			t.Errorf("%s: not a folded line: %q", path, sc.Text())
			continue
		}
		i := strings.LastIndexByte(sc.Text(), ' ')
		n, _ := strconv.Atoi(sc.Text()[i+1:])
		stacks[sc.Text()[:i]] += n
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(stacks) == 0 {
		t.Errorf("%s holds no stacks", path)
	}
	return stacks
}

// checkRecording reads a recording whole: it must hold samples and end
// with an End chunk, as a recording closed by sprof does.
func checkRecording(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s, err := recording.Summarize(f)
	if err != nil {
		t.Fatal(err)
	}
	if s.Samples == 0 || s.End == nil || s.Damaged != 0 {
		t.Errorf("%s: %d samples, end %v, damage %v; want samples and an end, no damage", path, s.Samples, s.End, s.Damaged)
	}
}

// startSpin starts the spin fixture (main→a→b→c) for secs seconds and
// stops it when the test ends.
func startSpin(t *testing.T, secs string) *exec.Cmd {
	t.Helper()
	c := exec.Command(fixture("e2e", "spin"), secs)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	return c
}

// TestRecordInterrupt runs the sprof binary as a user would and stops it
// with a signal before its time: the output must be complete and valid,
// the summary line printed, no temporary file left, and sprof must exit 0,
// or as the command it recorded did — for the whole host, for a -p list,
// and for a command, whether Ctrl-C reaches the whole process group (a
// terminal) or SIGTERM only sprof (a supervisor); and for SIGHUP, which a
// dropped SSH session sends.
func TestRecordInterrupt(t *testing.T) {
	testenv.RequireRoot(t)
	bin := buildSprof(t)
	spins := []*exec.Cmd{startSpin(t, "600"), startSpin(t, "600"), startSpin(t, "600")}
	pid := func(i int) string { return strconv.Itoa(spins[i].Process.Pid) }
	spin, err := filepath.Abs("../../testdata/e2e/spin")
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name string
		args []string
		ext  string
		// group sends the signal to sprof's process group, as a
		// terminal's Ctrl-C does; otherwise only sprof gets it.
		group bool
		sig   syscall.Signal
		// code is sprof's exit status: 0, or the command's.
		code  int
		check func(t *testing.T, out, stderr string)
	}{
		{"host", nil, ".pb.gz", false, syscall.SIGINT, 0, func(t *testing.T, out, _ string) {
			checkPprofFile(t, out)
		}},
		{"host, SIGHUP", nil, ".folded", false, syscall.SIGHUP, 0, func(t *testing.T, out, _ string) {
			checkFolded(t, out)
		}},
		{"recording, SIGHUP", nil, ".sprof", false, syscall.SIGHUP, 0, func(t *testing.T, out, _ string) {
			checkRecording(t, out)
		}},
		{"pid list", []string{"-p", pid(0) + "," + pid(1)}, ".pb.gz", false, syscall.SIGINT, 0, func(t *testing.T, out, _ string) {
			checkPprofFile(t, out)
			seen := map[string]int64{}
			for _, s := range parseProfile(t, out).Sample {
				seen[samplePid(s)] += s.Value[0]
			}
			if len(seen) != 2 || seen[pid(0)] == 0 || seen[pid(1)] == 0 {
				t.Errorf("samples per pid %v; want both of %s,%s and no other (not %s)", seen, pid(0), pid(1), pid(2))
			}
		}},
		// The shell forks spin (a background job would ignore SIGINT).
		// The shell dies of the SIGINT too: 128+2.
		{"command, Ctrl-C", []string{"--", "sh", "-c", spin + " 300; true"}, ".folded", true, syscall.SIGINT, 130, func(t *testing.T, out, _ string) {
			var chain int
			for stack, n := range checkFolded(t, out) {
				if strings.HasSuffix(stack, "main;a;b;c") {
					chain += n
				}
			}
			if chain == 0 {
				t.Errorf("no main;a;b;c stack of the command's child")
			}
		}},
		{"command, SIGTERM", []string{"--", spin, "300"}, ".pb.gz", false, syscall.SIGTERM, 128 + 15, func(t *testing.T, out, stderr string) {
			checkPprofFile(t, out)
			if !strings.Contains(stderr, "sending terminated to "+spin) || !strings.Contains(stderr, "exited with signal: terminated") {
				t.Errorf("sprof did not pass SIGTERM on to the command:\n%s", stderr)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "cpu"+tt.ext)
			ready := make(chan struct{})
			stderr := &startWatch{ready: ready}
			sprof := exec.Command(bin, append([]string{"record", "-F", "199", "-o", out}, tt.args...)...)
			sprof.Stderr = struct{ io.Writer }{stderr}
			sprof.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := sprof.Start(); err != nil {
				t.Fatal(err)
			}
			// Whatever happens, nothing of the process group outlives the test.
			defer syscall.Kill(-sprof.Process.Pid, syscall.SIGKILL)
			select {
			case <-ready:
			case <-time.After(60 * time.Second):
				t.Fatalf("sprof did not start sampling: %s", stderr.String())
			}
			time.Sleep(1500 * time.Millisecond)
			target := sprof.Process.Pid
			if tt.group {
				target = -target
			}
			if err := syscall.Kill(target, tt.sig); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- sprof.Wait() }()
			select {
			case <-done:
				if code := sprof.ProcessState.ExitCode(); code != tt.code {
					t.Fatalf("sprof after %v: %v, want exit status %d\n%s", tt.sig, sprof.ProcessState, tt.code, stderr.String())
				}
			case <-time.After(45 * time.Second):
				t.Fatalf("sprof still runs 45 s after %v:\n%s", tt.sig, stderr.String())
			}
			t.Logf("stderr:\n%s", stderr.String())
			secs, samples := summary(t, stderr.String(), out)
			if secs < 1 || secs > 30 || samples == 0 {
				t.Errorf("summary says %.1fs and %d samples; want about 1.5 s, some samples", secs, samples)
			}
			if left, _ := filepath.Glob(filepath.Join(filepath.Dir(out), ".*")); len(left) > 0 {
				t.Errorf("temporary files left: %q", left)
			}
			tt.check(t, out, stderr.String())
		})
	}
}

// TestRecordCommandChildren profiles a shell that starts the spin fixture
// twice: samples of both children, under their own pids, must be in the
// profile, and recording ends when the command does.
func TestRecordCommandChildren(t *testing.T) {
	testenv.RequireRoot(t)
	spin, err := filepath.Abs("../../testdata/e2e/spin")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "cpu.pb.gz")
	code, _, errs := runSprof("record", "-F", "199", "-o", out, "--", "sh", "-c", spin+" 1 & "+spin+" 1; wait")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, errs)
	}
	secs, _ := summary(t, errs, out)
	if secs > 20 {
		t.Errorf("recorded %.1fs for a 1 s command", secs)
	}
	p := parseProfile(t, out)
	pids := map[string]bool{}
	for _, s := range p.Sample {
		if s.Label["comm"][0] == "spin" && slices.Contains(names(s), "c") {
			pids[samplePid(s)] = true
		}
	}
	if len(pids) != 2 {
		t.Errorf("spin's chain seen in pids %v, want two children", pids)
	}
}

// TestRecordCommandExitStatus: `sprof record -- CMD` exits as CMD did, as
// perf does, and still writes the profile.
func TestRecordCommandExitStatus(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tt := range []struct {
		script string
		code   int
	}{{"exit 3", 3}, {"kill -TERM $$", 128 + 15}, {"true", 0}} {
		out := filepath.Join(t.TempDir(), "cpu.folded")
		code, _, errs := runSprof("record", "-o", out, "--", "sh", "-c", tt.script)
		if code != tt.code {
			t.Errorf("sh -c %q: sprof exits %d, want %d\n%s", tt.script, code, tt.code, errs)
		}
		if _, err := os.Stat(out); err != nil {
			t.Errorf("sh -c %q: no profile: %v", tt.script, err)
		}
	}
}

// TestRecordToStdout records with -o -: a profile, and a recording as a
// stream, on standard output, and no file named "-".
func TestRecordToStdout(t *testing.T) {
	testenv.RequireRoot(t)
	startSpin(t, "600")
	code, stdout, errs := runSprof("record", "-F", "199", "-d", "2s", "-o", "-", "--format", "folded")
	if code != 0 || !strings.Contains(stdout, ";c ") || !strings.Contains(errs, "wrote standard output (folded)") {
		t.Errorf("--format folded: exit %d, stdout %.200q, stderr %s", code, stdout, errs)
	}
	code, stdout, errs = runSprof("record", "-F", "199", "-d", "2s", "-o", "-", "--format", "sprof")
	if code != 0 {
		t.Fatalf("--format sprof: exit %d, %s", code, errs)
	}
	s, err := recording.Summarize(strings.NewReader(stdout))
	if err != nil || s.Samples == 0 || s.End == nil {
		t.Errorf("the recording on stdout: %v, %+v", err, s)
	}
	if _, err := os.Lstat("-"); err == nil {
		os.Remove("-")
		t.Error(`a file named "-" was created`)
	}
}

// TestRecordStats checks that --stats reports the BPF program's cost from
// the kernel's run-time statistics and sprof's own per sample.
func TestRecordStats(t *testing.T) {
	testenv.RequireRoot(t)
	startSpin(t, "30") // outlasts a slow start-up; killed at the end
	out := filepath.Join(t.TempDir(), "cpu.pb.gz")
	code, _, errs := runSprof("record", "--stats", "-d", "1s", "-o", out)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, errs)
	}
	t.Log(errs)
	bpfLine := regexp.MustCompile(`BPF program: (\d+) runs, (\d+) ns/run, (\d+) ns/sample`).FindStringSubmatch(errs)
	userLine := regexp.MustCompile(`userspace: (\d+) ns/sample`).FindStringSubmatch(errs)
	if bpfLine == nil || userLine == nil {
		t.Fatalf("--stats printed no BPF or userspace cost:\n%s", errs)
	}
	for _, v := range []string{bpfLine[1], bpfLine[2], bpfLine[3], userLine[1]} {
		if n, _ := strconv.Atoi(v); n <= 0 {
			t.Errorf("a --stats figure is %s, want > 0:\n%s", v, errs)
		}
	}
}

func TestOutputFormat(t *testing.T) {
	for _, tt := range []struct {
		path, format string
		want         exporters.Format
	}{
		{"cpu.pb.gz", "", exporters.Pprof},
		{"cpu.pprof", "", exporters.Pprof},
		{"cpu.pb", "", exporters.Pprof},
		{"app.folded", "", exporters.Folded},
		{"app.txt", "", exporters.Folded},
		{"x.sprof", "", formatRecording},
		{"cpu.pb.gz", "folded", exporters.Folded},
		{"out", "PPROF", exporters.Pprof},
		{"out.folded", "sprof", formatRecording},
		{"-", "folded", exporters.Folded},
		{"-", "sprof", formatRecording},
		{"cpu.otlp.pb", "", exporters.OTLP},
		{"cpu.otlp.json", "", exporters.OTLPJSON},
	} {
		if got, err := outputFormat(tt.path, tt.format); got != tt.want || err != nil {
			t.Errorf("outputFormat(%q, %q) = %q, %v; want %q", tt.path, tt.format, got, err, tt.want)
		}
	}
	for _, tt := range []struct{ path, format string }{{"cpu.gz", ""}, {"cpu", ""}, {"cpu.pb.gz", "perf"}, {"-", ""}} {
		_, err := outputFormat(tt.path, tt.format)
		if err == nil || !strings.Contains(err.Error(), "pprof, folded, svg, speedscope, otlp, otlp-json, sprof") {
			t.Errorf("outputFormat(%q, %q): error %v, want one listing the formats", tt.path, tt.format, err)
		}
	}
}

// TestKernelOnlyNamesUserSamples: under -K a sample without frames was
// taken in user mode, and says so rather than "[unknown]".
func TestKernelOnlyNamesUserSamples(t *testing.T) {
	e := &env{strings.NewReader(""), io.Discard, io.Discard}
	for _, tt := range []struct {
		args []string
		want string
	}{{[]string{"-K"}, userModeFrame}, {nil, ""}, {[]string{"-U"}, ""}} {
		o, err := parseRecord(e, tt.args)
		if err != nil {
			t.Fatal(err)
		}
		if o.export.EmptyStack != tt.want {
			t.Errorf("record %v: empty stacks named %q, want %q", tt.args, o.export.EmptyStack, tt.want)
		}
	}
}

// TestRecordPidsExit: `record -p` without -d ends, as perf record -p does,
// once all its processes have exited — here left as zombies, unreaped —
// with its output written, the summary printed and exit status 0.
func TestRecordPidsExit(t *testing.T) {
	testenv.RequireRoot(t)
	spins := []*exec.Cmd{startSpin(t, "3"), startSpin(t, "4")}
	exits := make(chan time.Time, len(spins))
	for _, c := range spins {
		go func() {
			// WNOWAIT leaves the exited process a zombie.
			var info unix.Siginfo
			unix.Waitid(unix.P_PID, c.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
			exits <- time.Now()
		}()
	}
	out := filepath.Join(t.TempDir(), "cpu.pb.gz")
	ready := make(chan struct{})
	stderr := &startWatch{ready: ready}
	type result struct{ code int }
	done := make(chan result, 1)
	go func() {
		code := run(&env{strings.NewReader(""), io.Discard, stderr}, []string{"record", "-F", "199", "-o", out,
			"-p", strconv.Itoa(spins[0].Process.Pid) + "," + strconv.Itoa(spins[1].Process.Pid)})
		done <- result{code}
	}()
	var started time.Time
	select {
	case <-ready:
		started = time.Now()
	case r := <-done:
		t.Fatalf("sprof ended before sampling, exit %d:\n%s", r.code, stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatal("sprof did not start sampling in 60 s")
	}
	last := <-exits
	if t2 := <-exits; t2.After(last) {
		last = t2
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("sprof still records 20 s after its processes exited")
	}
	t.Logf("stderr:\n%s", stderr.String())
	if r.code != 0 {
		t.Fatalf("exit %d", r.code)
	}
	// The recording's end, not sprof's exit: naming frames and writing
	// the profile after it take as long as the host's load makes them.
	p := parseProfile(t, out)
	end := time.Unix(0, p.TimeNanos+p.DurationNanos)
	if wait := end.Sub(last); last.After(started) && wait > time.Second {
		t.Errorf("the recording ended %v after the last process exited, want within 1 s", wait)
	}
	summary(t, stderr.String(), out)
	checkPprofFile(t, out)
}

// otherThread returns a thread id of process pid that is not pid, waiting
// up to 5 s for the process to start one.
func otherThread(t *testing.T, pid int) int {
	t.Helper()
	for range 50 {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range tasks {
			if tid, _ := strconv.Atoi(d.Name()); tid != 0 && tid != pid {
				return tid
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("process %d has no second thread", pid)
	return 0
}

// TestParsePidsThread: a thread id given to -p stands for its process,
// which the user is told in one line, and a process named twice is
// filtered once.
func TestParsePidsThread(t *testing.T) {
	pid := os.Getpid()
	tid := otherThread(t, pid)
	var w strings.Builder
	pids, err := parsePids(&w, fmt.Sprintf("%d,%d", tid, pid))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(pids, []uint32{uint32(pid)}) {
		t.Errorf("parsePids(%d,%d) = %v, want [%d]", tid, pid, pids, pid)
	}
	if want := fmt.Sprintf("sprof: -p %d is a thread of process %d; profiling the process\n", tid, pid); w.String() != want {
		t.Errorf("parsePids said %q, want %q", w.String(), want)
	}
}

// TestRecordThreadID records a Go program by the id of one of its threads
// other than the main one: the samples of the whole process must be there.
func TestRecordThreadID(t *testing.T) {
	testenv.RequireRoot(t)
	bin := filepath.Join(t.TempDir(), "gospin")
	if out, err := exec.Command("go", "build", "-o", bin, "../../testdata/e2e/gospin").CombinedOutput(); err != nil {
		t.Fatalf("build gospin: %v\n%s", err, out)
	}
	c := exec.Command(bin, "30")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	pid := c.Process.Pid
	tid := otherThread(t, pid)
	out := filepath.Join(t.TempDir(), "cpu.pb.gz")
	code, _, errs := runSprof("record", "-F", "199", "-d", "1s", "-p", strconv.Itoa(tid), "-o", out)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, errs)
	}
	if want := fmt.Sprintf("sprof: -p %d is a thread of process %d; profiling the process\n", tid, pid); !strings.Contains(errs, want) {
		t.Errorf("stderr lacks %q:\n%s", want, errs)
	}
	if !strings.Contains(errs, " lost, 1 process; wrote ") {
		t.Errorf("the summary does not say \"1 process\":\n%s", errs)
	}
	var samples int64
	for _, s := range parseProfile(t, out).Sample {
		if samplePid(s) != strconv.Itoa(pid) {
			t.Fatalf("a sample of pid %s, want only %d", samplePid(s), pid)
		}
		samples += s.Value[0]
	}
	if samples == 0 {
		t.Errorf("no samples of process %d recorded by its thread %d:\n%s", pid, tid, errs)
	}
}

// TestRecordOutputIsDirectory: an output path that is a directory is
// refused in one line before sampling, not after the recording.
func TestRecordOutputIsDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cpu.pb.gz")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.RequireRoot(t)
	code, _, errs := runSprof("record", "-d", "30s", "-o", dir)
	want := "sprof record: output " + dir + " is a directory; name a regular file, a character device such as /dev/null, a FIFO, or - for standard output\n"
	if code != 1 || errs != want {
		t.Errorf("exit %d, stderr %q; want exit 1, %q", code, errs, want)
	}
	if left, _ := os.ReadDir(filepath.Dir(dir)); len(left) != 1 {
		t.Errorf("files left beside the output: %v", left)
	}
	// A recording, published early, is refused up front too.
	rec := filepath.Join(t.TempDir(), "cpu.sprof")
	if err := os.Mkdir(rec, 0o755); err != nil {
		t.Fatal(err)
	}
	code, _, errs = runSprof("record", "-d", "30s", "-o", rec)
	if code != 1 || !strings.Contains(errs, rec+" is a directory") || strings.Count(errs, "\n") != 1 {
		t.Errorf("-o %s: exit %d, stderr %q; want exit 1, one line saying it is a directory", rec, code, errs)
	}
}
