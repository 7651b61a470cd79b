package bpf

import (
	"fmt"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// pidLimit is the number of pids the filter covers, PID_LIMIT of pidset.h:
// every pid a 64-bit kernel can hand out (PID_MAX_LIMIT).
const pidLimit = 4 << 20

// pidSet is the pid filter of the BPF programs (pids in pidset.h), a byte
// per pid, written through a memory map of its array: the programs' fork
// and exit hooks store bytes into it meanwhile, and a store of the whole
// 4 KiB value through the bpf syscall would undo theirs in its chunk.
type pidSet struct {
	mem []byte // one byte per pid, nonzero when in the filter
}

// openPidSet maps m, the filter's array, into memory.
func openPidSet(m *ebpf.Map) (*pidSet, error) {
	size := int(m.MaxEntries()) * int(m.ValueSize())
	if size != pidLimit {
		return nil, fmt.Errorf("pid filter %s holds %d bytes, want one per pid up to %d", m, size, pidLimit)
	}
	mem, err := unix.Mmap(m.FD(), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map the pid filter %s into memory: %w", m, err)
	}
	return &pidSet{mem: mem}, nil
}

// checkPid says why pid cannot be a process's id, if it cannot.
func checkPid(pid uint32) error {
	if pid == 0 || pid >= pidLimit {
		return fmt.Errorf("pid %d is out of the kernel's range 1-%d", pid, pidLimit-1)
	}
	return nil
}

// add puts pid in the filter.
func (p *pidSet) add(pid uint32) error {
	if err := checkPid(pid); err != nil {
		return err
	}
	p.mem[pid] = 1
	return nil
}

func (p *pidSet) close() error {
	if p == nil {
		return nil
	}
	if err := unix.Munmap(p.mem); err != nil {
		return fmt.Errorf("unmap the pid filter: %w", err)
	}
	p.mem = nil
	return nil
}
