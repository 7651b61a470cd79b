package bpf

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// cpuClock is one CPU-clock perf event with the program attached.
type cpuClock struct {
	fd int
}

// openCPUClock opens a PERF_COUNT_SW_CPU_CLOCK event on cpu that fires hz
// times per second of CPU time (freq mode), attaches prog and leaves the
// event disabled until enable. Idle time does not fire the
// event at all unless includeIdle, which saves the program runs the filter
// would discard anyway.
func openCPUClock(cpu, hz int, includeIdle bool, prog *ebpf.Program) (*cpuClock, error) {
	attr := unix.PerfEventAttr{
		Type:   unix.PERF_TYPE_SOFTWARE,
		Config: unix.PERF_COUNT_SW_CPU_CLOCK,
		Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Sample: uint64(hz),
		Bits:   unix.PerfBitFreq | unix.PerfBitDisabled,
	}
	if !includeIdle {
		attr.Bits |= unix.PerfBitExcludeIdle
	}
	fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
			return nil, fmt.Errorf("%w: perf_event_open on CPU %d: %v; %s", ErrPermission, cpu, err, perfPermissionHint(paranoid()))
		}
		return nil, fmt.Errorf("perf_event_open cpu-clock on CPU %d at %d Hz: %w", cpu, hz, err)
	}
	// PERF_EVENT_IOC_SET_BPF (4.9) rather than a BPF link, which perf
	// events take only since 5.15: the program stays attached while the
	// event's fd is open, which is all a link would add.
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_BPF, prog.FD()); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("attach BPF program to CPU %d: %w", cpu, err)
	}
	return &cpuClock{fd: fd}, nil
}

func (c *cpuClock) enable() error {
	if err := unix.IoctlSetInt(c.fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
		return fmt.Errorf("enable cpu-clock event: %w", err)
	}
	return nil
}

func (c *cpuClock) disable() error {
	if err := unix.IoctlSetInt(c.fd, unix.PERF_EVENT_IOC_DISABLE, 0); err != nil {
		return fmt.Errorf("disable cpu-clock event: %w", err)
	}
	return nil
}

func (c *cpuClock) close() error {
	if err := unix.Close(c.fd); err != nil {
		return fmt.Errorf("close cpu-clock event: %w", err)
	}
	return nil
}

// paranoid returns kernel.perf_event_paranoid, or 2 (mainline's highest
// level) when it cannot be read.
func paranoid() int {
	v, err := readSysctl(paranoidSys)
	if err != nil {
		return 2
	}
	return v
}

// perfPermissionHint says why perf_event_open refused a process that may
// load BPF programs: above level 2 of kernel.perf_event_paranoid, which
// mainline lacks, Debian's and Ubuntu's kernels open perf events only for
// CAP_SYS_ADMIN, and CAP_PERFMON is not enough.
func perfPermissionHint(paranoid int) string {
	if paranoid > 2 {
		return fmt.Sprintf("kernel.perf_event_paranoid is %d, at which Debian's and Ubuntu's kernels open perf events only for CAP_SYS_ADMIN: "+
			"run sprof as root or with sudo, or `sysctl kernel.perf_event_paranoid=2`", paranoid)
	}
	return "sprof needs root or CAP_PERFMON"
}
