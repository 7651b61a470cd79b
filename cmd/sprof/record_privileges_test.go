package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/sprof/sprof/internal/testenv"
)

// privilegeLine is what `sprof record` says without root or CAP_BPF and
// CAP_PERFMON (bpf.ErrPermission's message).
const privilegeLine = "sprof record: missing privileges: sprof needs root, or CAP_BPF and CAP_PERFMON plus, for whole stacks and named frames, " +
	"CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH, CAP_CHECKPOINT_RESTORE, CAP_SYSLOG and CAP_SYS_RESOURCE (README.md, Requirements); " +
	"run it with sudo, or grant them with `setcap cap_bpf,cap_perfmon,cap_sys_ptrace,cap_dac_read_search," +
	"cap_checkpoint_restore,cap_syslog,cap_sys_resource+ep` on the sprof binary"

// TestRecordWithoutPrivileges runs `sprof record` as this test binary
// rerun without privileges (TestMain's SPROF_TEST_MAIN) — as nobody, and as root without CAP_BPF,
// CAP_PERFMON and CAP_SYS_ADMIN — and expects exit status 1 and the
// sentence that names what is missing and how to fix it, with no Go stack
// trace and no output file: that one line, nothing else.
func TestRecordWithoutPrivileges(t *testing.T) {
	testenv.RequireRoot(t)
	setpriv := testenv.RequireTool(t, "setpriv")
	bin := testenv.UnprivilegedCopy(t)
	dir := filepath.Dir(bin)
	for _, tc := range []struct {
		name string
		as   []string
	}{
		{"nobody", []string{"--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"}},
		{"root without capabilities", []string{"--inh-caps=-all", "--bounding-set=-bpf,-perfmon,-sys_admin"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(setpriv, append(tc.as, bin)...)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "SPROF_TEST_MAIN=record -d 1s -o cpu.pb.gz")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			t.Logf("stderr:\n%s", stderr.String())
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("exit: %v, want status 1", err)
			}
			if got := stderr.String(); got != privilegeLine+"\n" {
				t.Errorf("stderr %q, want the one line %q", got, privilegeLine)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout %q, want nothing", stdout.String())
			}
			if _, err := os.Stat(filepath.Join(dir, "cpu.pb.gz")); err == nil {
				t.Error("an output file was left behind")
			}
		})
	}
}
