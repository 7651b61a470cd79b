package bpf

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Errors Open returns when the host cannot run the sampler. Each is wrapped
// in a one-line message that says what is missing and how to fix it; test
// for them with errors.Is.
var (
	// ErrPermission: not root and without CAP_BPF and CAP_PERFMON.
	ErrPermission = errors.New("missing privileges")
	// ErrNoBTF: the kernel does not describe its types (no /sys/kernel/btf/vmlinux).
	ErrNoBTF = errors.New("kernel BTF missing")
	// ErrUnsupported: the kernel lacks a BPF feature the sampler uses.
	ErrUnsupported = errors.New("kernel BPF support missing")
	// ErrFrequency: the frequency is not positive or above kernel.perf_event_max_sample_rate.
	ErrFrequency = errors.New("bad sampling frequency")
	// ErrNoPidFilter: AddPid on a Sampler opened without Pids, which samples every process.
	ErrNoPidFilter = errors.New("sampler has no pid filter")
	// ErrNoStackCopy: SetCopy on a Sampler opened with Config.StackCopy 0.
	ErrNoStackCopy = errors.New("sampler copies no stacks")
	// ErrNoTables: LoadTable or MapTable on a Sampler opened with
	// Config.UnwindTables 0.
	ErrNoTables = errors.New("sampler has no unwind tables")
)

const (
	kernelBTFPath    = "/sys/kernel/btf/vmlinux"
	maxSampleRateSys = "/proc/sys/kernel/perf_event_max_sample_rate"
	paranoidSys      = "/proc/sys/kernel/perf_event_paranoid"
)

// CheckHost reports whether this process on this kernel can run the
// sampler: privileges, kernel BTF and the BPF features it uses, the checks
// Open starts with. Its error is one line naming what is missing and how to
// fix it, and wraps ErrPermission, ErrNoBTF or ErrUnsupported. A command
// calls it before anything else, so a user without privileges learns that
// first and only that.
func CheckHost() error {
	if err := checkPrivileges(); err != nil {
		return err
	}
	return ProbeFeatures().Check()
}

// SetcapCommand grants the sprof binary every capability it uses, for a
// user who records without root (append the binary's path).
const SetcapCommand = "setcap cap_bpf,cap_perfmon,cap_sys_ptrace,cap_dac_read_search,cap_checkpoint_restore,cap_syslog,cap_sys_resource+ep"

// checkPrivileges fails unless the effective capabilities include CAP_BPF
// and CAP_PERFMON (root has both; CAP_SYS_ADMIN stands in for both).
func checkPrivileges() error {
	caps, err := EffectiveCaps()
	if err != nil {
		return err
	}
	if CanLoad(caps) {
		return nil
	}
	// The capabilities beyond the two checked here are those README.md's
	// Requirements lists: without them stacks and symbols come out partial.
	return fmt.Errorf("%w: sprof needs root, or CAP_BPF and CAP_PERFMON plus, for whole stacks and named frames, "+
		"CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH, CAP_CHECKPOINT_RESTORE, CAP_SYSLOG and CAP_SYS_RESOURCE (README.md, Requirements); "+
		"run it with sudo, or grant them with `%s` on the sprof binary", ErrPermission, SetcapCommand)
}

// checkBTF fails when the kernel exposes no BTF for itself at path
// (kernelBTFPath), which CO-RE relocations and the tp_btf fork hook need.
func checkBTF(path string) error {
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("%w: %s is missing; sprof needs a kernel built with CONFIG_DEBUG_INFO_BTF=y "+
			"(the default of Debian, Ubuntu, Fedora and RHEL kernels since 2020)", ErrNoBTF, path)
	}
	return nil
}

// EffectiveCaps returns this thread's effective capabilities, bit N for
// capability N (unix.CAP_SYS_PTRACE...).
func EffectiveCaps() (uint64, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return 0, fmt.Errorf("read process capabilities: %w", err)
	}
	return uint64(data[1].Effective)<<32 | uint64(data[0].Effective), nil
}

// CanLoad reports whether the capabilities caps allow loading the sampler
// and opening its perf events: CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN,
// which stands in for both (and is all kernels before 5.8 know).
func CanLoad(caps uint64) bool {
	has := func(c uint) bool { return caps&(1<<c) != 0 }
	return has(unix.CAP_SYS_ADMIN) || (has(unix.CAP_BPF) && has(unix.CAP_PERFMON))
}

// featureError explains a failed probe of f on kernel release: the kernel
// lacks it, or refuses BPF to this process.
func featureError(release string, f Feature, err error) error {
	if errors.Is(err, ebpf.ErrNotSupported) {
		return fmt.Errorf("%w: the kernel (%s) has no %s (Linux %s, for %s); sprof needs Linux 5.10 or newer with BPF enabled",
			ErrUnsupported, release, f, f.Since(), f.Use())
	}
	if errors.Is(err, unix.EPERM) {
		return fmt.Errorf("%w: the kernel refused BPF (%v); check kernel.unprivileged_bpf_disabled, "+
			"lockdown, seccomp and, before Linux 5.11, RLIMIT_MEMLOCK (CAP_SYS_RESOURCE lifts it), or run sprof as root", ErrPermission, err)
	}
	return fmt.Errorf("probe %s: %w", f, err)
}

// checkFrequency refuses rates the kernel would refuse with a bare EINVAL.
func checkFrequency(hz int) error {
	if hz <= 0 {
		return fmt.Errorf("%w: %d Hz; the frequency must be at least 1 Hz", ErrFrequency, hz)
	}
	limit, err := readSysctl(maxSampleRateSys)
	if err != nil {
		return err
	}
	if hz > limit {
		return fmt.Errorf("%w: %d Hz is above kernel.perf_event_max_sample_rate (%d Hz); use a lower frequency "+
			"or raise the limit with `sysctl kernel.perf_event_max_sample_rate=%d`", ErrFrequency, hz, limit, hz)
	}
	return nil
}

// readSysctl reads the integer in a /proc/sys file.
func readSysctl(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", path, err)
	}
	return v, nil
}
