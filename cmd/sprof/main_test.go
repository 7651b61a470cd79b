package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// TestMain lets the test binary stand in for sprof as the launcher of
// profiled commands (see launch.go), as the real binary does.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == launcherArg {
		os.Exit(runLauncher(os.Args[2:]))
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
	for _, args := range [][]string{{}, {"--help"}, {"help"}} {
		code, out, _ := runSprof(args...)
		if code != 0 || !strings.Contains(out, "sprof record -F 99") || !strings.Contains(out, "record") {
			t.Errorf("sprof %v: exit %d, output %q", args, code, out)
		}
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
}

func TestUnknownCommand(t *testing.T) {
	code, _, errs := runSprof("recrod")
	if code != 2 || !strings.Contains(errs, `unknown command "recrod"`) || !strings.Contains(errs, "record") {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
}

// TestRecordUsageErrors checks that each bad command line is refused before
// anything is loaded, with exit status 2 and a first line that names the
// flag and what it allows.
func TestRecordUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-F", "0"}, "--frequency 0: must be at least 1"},
		{[]string{"-F", "100000000"}, "kernel.perf_event_max_sample_rate"},
		{[]string{"-F", "many"}, `invalid argument "many" for "-F, --frequency"`},
		{[]string{"-d", "soon"}, `"soon" is not a duration`},
		{[]string{"-d", "-5"}, "negative"},
		{[]string{"-p", "12x"}, `"12x" is not a process id`},
		{[]string{"-p", "99999999999"}, "is not a process id"},
		{[]string{"-U", "-K"}, "exclude each other"},
		{[]string{"-p", "1", "--", "true"}, "exclude each other"},
		{[]string{"--"}, "no command after --"},
		{[]string{"ls"}, `unexpected argument "ls"`},
		{[]string{"--ring-buffer", "5000"}, "power of two"},
		{[]string{"--ring-buffer", "lots"}, "is not a size"},
		{[]string{"--format", "xml"}, "xml"},
		{[]string{"-o", "x.docx"}, "docx"},
		{[]string{"--bogus"}, "unknown flag: --bogus"},
		{[]string{"--labels", "comm,uid"}, `--labels: unknown label "uid"`},
		{[]string{"--process-root", "tree"}, `--process-root: unknown process root "tree"`},
		{[]string{"-o", "x.sprof", "--labels", "comm"}, "give them to 'sprof report'"},
	}
	for _, tt := range tests {
		code, _, errs := runSprof(append([]string{"record"}, tt.args...)...)
		first, _, _ := strings.Cut(errs, "\n")
		if code != 2 || !strings.Contains(first, tt.want) {
			t.Errorf("record %v: exit %d, first line %q; want exit 2 and %q", tt.args, code, first, tt.want)
		}
	}
}
