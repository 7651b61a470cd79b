package main

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// TestMain lets the test binary stand in for sprof as the launcher of
// profiled commands (see launch.go), as the real binary does, and, with
// SPROF_TEST_MAIN set to a command line, for sprof itself: tests rerun it
// with other privileges.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == launcherArg {
		os.Exit(runLauncher(os.Args[2:]))
	}
	if args := os.Getenv("SPROF_TEST_MAIN"); args != "" {
		os.Exit(run(&env{os.Stdin, os.Stdout, os.Stderr}, strings.Fields(args)))
	}
	os.Exit(m.Run())
}

// runSprof runs a command line in-process and returns its exit status,
// stdout and stderr.
func runSprof(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(&env{strings.NewReader(""), &out, &errb}, args)
	return code, out.String(), errb.String()
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		code, out, _ := runSprof(args...)
		if code != 0 || !strings.Contains(out, "sprof record -F 99") || !strings.Contains(out, "record") {
			t.Errorf("sprof %v: exit %d, output %q", args, code, out)
		}
	}
	// No command is a usage error: the usage goes to stderr, exit 2.
	if code, out, errs := runSprof(); code != 2 || out != "" || !strings.Contains(errs, "Usage:\n  sprof COMMAND") {
		t.Errorf("sprof: exit %d, stdout %q, stderr %q; want exit 2 and the usage on stderr", code, out, errs)
	}
	for _, cmd := range []string{"record", "report", "agent"} {
		for _, help := range []string{"--help", "-h"} {
			code, out, errs := runSprof(cmd, help)
			if n := strings.Count(out, "Usage: sprof "+cmd); code != 0 || n != 1 || errs != "" {
				t.Errorf("%s %s: exit %d, usage printed %d times, stderr %q", cmd, help, code, n, errs)
			}
		}
	}
	code, out, _ := runSprof("record", "--help")
	for _, want := range []string{"--frequency", "-F", "--duration", "--pid", "--cgroup", "--output", "--user-only", "--kernel-only", "--labels", "--process-root", "--symbolizer", "--cache-dir", "Examples:"} {
		if !strings.Contains(out, want) {
			t.Errorf("record --help lacks %q", want)
		}
	}
	if code != 0 {
		t.Errorf("record --help: exit %d", code)
	}
}

func TestVersion(t *testing.T) {
	code, out, _ := runSprof("version")
	if code != 0 || !strings.HasPrefix(out, "sprof ") {
		t.Fatalf("version: exit %d, %q", code, out)
	}
	// How the test binary is linked, as file(1) says, and the BPF object's
	// hash, as sha256sum says.
	fileOut := toolOutput(t, "file", "-L", "/proc/self/exe")
	linked := ", dynamically linked (CGO_ENABLED=0 builds a static binary), "
	if strings.Contains(fileOut, "statically linked") {
		linked = ", statically linked, "
	}
	arch := map[string]string{"amd64": "x86", "arm64": "arm64"}[runtime.GOARCH]
	sum := strings.Fields(toolOutput(t, "sha256sum", "../../bpf/sprof_"+arch+"_bpfel.o"))[0]
	for _, want := range []string{", " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + ", ", linked, "BPF object sha256 " + sum[:16] + "\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("version %q lacks %q (file: %s)", out, want, fileOut)
		}
	}
	code, out, errs := runSprof("version", "extra")
	if want := "sprof version: unexpected argument \"extra\"; version takes none; see 'sprof version --help'\n"; code != 2 || out != "" || errs != want {
		t.Errorf("version extra: exit %d, stdout %q, stderr %q; want exit 2, %q", code, out, errs, want)
	}
}

func TestCount(t *testing.T) {
	for _, tt := range []struct {
		n    int
		want string
	}{{0, "0 processes"}, {1, "1 process"}, {2, "2 processes"}} {
		if got := count(tt.n, "process", "processes"); got != tt.want {
			t.Errorf("count(%d) = %q, want %q", tt.n, got, tt.want)
		}
	}
}

// A recording that lost 1% or more of its samples says so, with the flag
// that helps; fewer lost leave the summary's count alone.
func TestLossHint(t *testing.T) {
	for _, tt := range []struct {
		kept, lost uint64
		want       string
	}{
		{0, 0, ""},
		{1000, 0, ""},
		{991, 9, ""},
		{99, 1, "1.0% of the samples"},
		{5401, 211321, "97.5% of the samples"},
		{0, 7, "100.0% of the samples"},
	} {
		got := lossHint(tt.kept, tt.lost)
		if tt.want == "" && got != "" || tt.want != "" && (!strings.HasPrefix(got, tt.want) || !strings.Contains(got, "--frequency")) {
			t.Errorf("lossHint(%d, %d) = %q; want %q...", tt.kept, tt.lost, got, tt.want)
		}
	}
}

func TestUnknownCommand(t *testing.T) {
	code, _, errs := runSprof("recrod")
	if code != 2 || !strings.Contains(errs, `unknown command "recrod"`) || !strings.Contains(errs, "record") {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
}

// TestRecordUsageErrors checks that each bad command line is refused before
// anything is loaded, with exit status 2 and one line that names the flag,
// what it allows, and where the help is.
func TestRecordUsageErrors(t *testing.T) {
	max, err := maxSampleRate()
	if err != nil {
		t.Fatalf("kernel.perf_event_max_sample_rate: %v", err)
	}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-F", "0"}, "--frequency 0: must be 1 to " + strconv.Itoa(max) + " Hz"},
		{[]string{"-F", "-5"}, "--frequency -5: must be 1 to"},
		{[]string{"-F", strconv.Itoa(max + 1)}, fmt.Sprintf("--frequency %d is above the kernel's limit of %d Hz (kernel.perf_event_max_sample_rate)", max+1, max)},
		{[]string{"-F", "many"}, `invalid argument "many" for "-F, --frequency" flag: not a whole number of samples per second (examples: 19, 99, 499)`},
		{[]string{"--frequency=abc"}, `"-F, --frequency" flag: not a whole number`},
		{[]string{"-d", "soon"}, `"soon" is not a duration (examples: 10, 10s, 1m30s, 500ms)`},
		{[]string{"-d", "-5"}, `"-5" is negative (examples`},
		{[]string{"-d", "-1s"}, `for "-d, --duration" flag: duration "-1s" is negative (examples: 10, 10s`},
		{[]string{"-p", "12x"}, `--pid: "12x" is not a process id (expected a comma-separated list like 1234,5678)`},
		{[]string{"-p", "abc"}, `--pid: "abc" is not a process id`},
		{[]string{"-p", "1,abc"}, `--pid: "abc" is not a process id`},
		{[]string{"-p", "99999999999"}, "is not a process id"},
		{[]string{"-U", "-K"}, "--user-only and --kernel-only exclude each other"},
		{[]string{"-p", "1", "--", "true"}, "exclude each other"},
		{[]string{"--"}, "no command after --"},
		{[]string{"ls"}, `unexpected argument "ls"`},
		{[]string{"--ring-buffer", "5000"}, "power of two"},
		{[]string{"--ring-buffer", "lots"}, "is not a size"},
		{[]string{"--format", "xyz"}, `--format: unknown format "xyz"; formats are: pprof, folded, svg, speedscope, otlp, otlp-json, sprof`},
		{[]string{"-o", "x.docx"}, "--output x.docx: cannot tell the format from the name; end it in .pb.gz, .pprof, .pb, .folded, .txt"},
		{[]string{"--bogus"}, "unknown flag: --bogus; see 'sprof record --help'"},
		{[]string{"-U=maybe"}, `invalid argument "maybe" for "-U, --user-only" flag: want true or false; see`},
		{[]string{"--cgroup"}, "flag needs an argument: --cgroup"},
		{[]string{"-x"}, "unknown shorthand flag: 'x' in -x"},
		{[]string{"--labels", "comm,uid"}, `--labels: unknown label "uid"`},
		{[]string{"--process-root", "tree"}, `--process-root: unknown process root "tree"`},
		{[]string{"-o", "x.sprof", "--labels", "comm"}, "give them to 'sprof report'"},
		{[]string{"--cgroup", "/nonexistent/app.service"}, "--cgroup: /nonexistent/app.service: no such file or directory (give a cgroup v2 directory"},
		{[]string{"--cgroup", "/proc"}, "--cgroup: /proc is not in a cgroup v2 hierarchy"},
		{[]string{"--off-cpu", "--cpu", "-o", "x.folded"}, "folded output has one value per stack; --off-cpu --cpu needs pprof (.pb.gz), OTLP or a .sprof recording"},
		{[]string{"--off-cpu-min", "5ms"}, "--off-cpu-min needs --off-cpu"},
		{[]string{"--unwind", "dwarf"}, `--unwind "dwarf": want copy, bpf or auto`},
		{[]string{"--unwind", "copy", "--unwind-tables", "64M"}, "--unwind-tables needs --unwind bpf or auto"},
		{[]string{"--unwind", "bpf", "--unwind-tables", "64K"}, "--unwind-tables 65536: give at least 1M"},
		{[]string{"--off-cpu", "--off-cpu-min", "0"}, "--off-cpu-min must be positive"},
		{[]string{"--off-cpu-syscall-budget", "0"}, "--off-cpu-syscall-budget needs --off-cpu"},
		{[]string{"--off-cpu", "--off-cpu-syscall-budget", "-5"}, "--off-cpu-syscall-budget -5: give 0 (no limit) or more"},
		{[]string{"--cpu=false"}, "--cpu=false records nothing; add --off-cpu"},
	}
	for _, tt := range tests {
		code, out, errs := runSprof(append([]string{"record"}, tt.args...)...)
		if code != 2 || !strings.Contains(errs, tt.want) || strings.Count(errs, "\n") != 1 || out != "" {
			t.Errorf("record %v: exit %d, stdout %q, stderr %q; want exit 2 and one line with %q", tt.args, code, out, errs, tt.want)
		}
		if !strings.HasPrefix(errs, "sprof record: ") || !strings.HasSuffix(errs, "; see 'sprof record --help'\n") {
			t.Errorf("record %v: stderr %q does not say where the help is", tt.args, errs)
		}
	}
}
