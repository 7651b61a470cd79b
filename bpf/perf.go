package bpf

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

const onlineCPUsPath = "/sys/devices/system/cpu/online"

// maxCPUs bounds what a CPU list may name, far above any real machine, so a
// corrupt list cannot make us open millions of events.
const maxCPUs = 1 << 16

// onlineCPUs lists the CPUs that are online now. CPUs brought online later
// are not sampled.
func onlineCPUs() ([]int, error) {
	b, err := os.ReadFile(onlineCPUsPath)
	if err != nil {
		return nil, fmt.Errorf("list online CPUs: %w", err)
	}
	cpus, err := parseCPUList(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", onlineCPUsPath, err)
	}
	return cpus, nil
}

// parseCPUList parses the kernel's CPU list format, e.g. "0-3,6,8-9"
// (Documentation/admin-guide/cputopology.rst), in increasing order.
func parseCPUList(s string) ([]int, error) {
	var cpus []int
	if s == "" {
		return nil, errors.New("empty CPU list")
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := strconv.Atoi(lo)
		if err != nil || first < 0 || first >= maxCPUs {
			return nil, fmt.Errorf("bad CPU number %q in %q", lo, s)
		}
		last := first
		if isRange {
			last, err = strconv.Atoi(hi)
			if err != nil || last < first || last >= maxCPUs {
				return nil, fmt.Errorf("bad CPU range %q in %q", part, s)
			}
		}
		if len(cpus) > 0 && first <= cpus[len(cpus)-1] {
			return nil, fmt.Errorf("CPU list %q is not increasing at %q", s, part)
		}
		for c := first; c <= last; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// cpuClock is one CPU-clock perf event with the program attached.
type cpuClock struct {
	fd   int
	link link.Link
}

// openCPUClock opens a PERF_COUNT_SW_CPU_CLOCK event on cpu that fires hz
// times per second of CPU time (freq mode), attaches prog through a BPF link
// and leaves the event disabled until enable. Idle time does not fire the
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
	l, err := link.AttachRawLink(link.RawLinkOptions{Target: fd, Program: prog, Attach: ebpf.AttachPerfEvent})
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("attach BPF program to CPU %d: %w", cpu, err)
	}
	return &cpuClock{fd: fd, link: l}, nil
}

func (c *cpuClock) enable() error {
	if err := unix.IoctlSetInt(c.fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
		return fmt.Errorf("enable cpu-clock event: %w", err)
	}
	return nil
}

func (c *cpuClock) close() error {
	return errors.Join(c.link.Close(), unix.Close(c.fd))
}
