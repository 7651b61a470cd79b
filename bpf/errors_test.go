package bpf

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// The host checks' errors are one line that names what is missing and how
// to fix it, and wrap the error a caller tests for. A kernel without BTF or
// without a BPF feature cannot be had here, so those are checked on their
// inputs; TestOpenWithoutPrivileges runs the privilege check for real.
func TestHostErrors(t *testing.T) {
	noBTF := filepath.Join(t.TempDir(), "vmlinux")
	probe := fmt.Errorf("probe: %w", ebpf.ErrNotSupported)
	for _, tc := range []struct {
		name string
		err  error
		is   error
		says []string
	}{
		{"no BTF", checkBTF(noBTF), ErrNoBTF, []string{noBTF + " is missing", "CONFIG_DEBUG_INFO_BTF=y"}},
		{"no ring buffer", featureError("5.4.0", FeatureRingBuf, probe), ErrUnsupported,
			[]string{"kernel (5.4.0) has no ring buffer (Linux 5.8, for passing samples", "Linux 5.10 or newer"}},
		{"BPF refused", featureError("6.1.0", FeatureRingBuf, fmt.Errorf("probe: %w", unix.EPERM)), ErrPermission,
			[]string{"kernel refused BPF", "kernel.unprivileged_bpf_disabled", "run sprof as root"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !errors.Is(tc.err, tc.is) {
				t.Fatalf("%v does not wrap %v", tc.err, tc.is)
			}
			msg := tc.err.Error()
			if strings.Contains(msg, "\n") {
				t.Errorf("%q spans lines", msg)
			}
			for _, s := range tc.says {
				if !strings.Contains(msg, s) {
					t.Errorf("%q does not say %q", msg, s)
				}
			}
		})
	}
}

// Above level 2 of kernel.perf_event_paranoid, Debian's and Ubuntu's
// kernels want CAP_SYS_ADMIN to open perf events: the error says so and
// how to record anyway; at mainline's levels, what sprof needs.
func TestPerfPermissionHint(t *testing.T) {
	for v, want := range map[int]string{
		2: "sprof needs root or CAP_PERFMON",
		3: "kernel.perf_event_paranoid is 3, at which Debian's and Ubuntu's kernels open perf events only for CAP_SYS_ADMIN: run sprof as root or with sudo, or `sysctl kernel.perf_event_paranoid=2`",
	} {
		if got := perfPermissionHint(v); got != want {
			t.Errorf("paranoid %d: %q, want %q", v, got, want)
		}
	}
}
