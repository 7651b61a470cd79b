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
			return nil, fmt.Errorf("%w: perf_event_open on CPU %d: %v; sprof needs root or CAP_PERFMON",
				ErrPermission, cpu, err)
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
