package bpf

import (
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// pidLimit is the number of pids the filter and the marks cover,
// PID_LIMIT of pidset.h: every pid a 64-bit kernel can hand out
// (PID_MAX_LIMIT).
const pidLimit = 4 << 20

// pidBytes is one of the BPF programs' arrays of a byte per pid (pidset.h),
// written through a memory map of the array: the programs' fork and exit
// hooks store bytes into it meanwhile, and a store of a whole 4 KiB chunk
// through the bpf syscall would undo theirs in its chunk.
type pidBytes struct {
	mem []byte // one byte per pid
}

// mapPidBytes maps m, an array of a byte per pid, into memory.
func mapPidBytes(m *ebpf.Map) (*pidBytes, error) {
	size := int(m.MaxEntries()) * int(m.ValueSize())
	if size != pidLimit {
		return nil, fmt.Errorf("BPF map %s holds %d bytes, want one per pid up to %d", m, size, pidLimit)
	}
	mem, err := unix.Mmap(m.FD(), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map BPF map %s into memory: %w", m, err)
	}
	return &pidBytes{mem: mem}, nil
}

// checkPid says why pid cannot be a process's id, if it cannot.
func checkPid(pid uint32) error {
	if pid == 0 || pid >= pidLimit {
		return fmt.Errorf("pid %d is out of the kernel's range 1-%d", pid, pidLimit-1)
	}
	return nil
}

// add puts pid in the set, the pid filter (pids of pidset.h).
func (p *pidBytes) add(pid uint32) error {
	if err := checkPid(pid); err != nil {
		return err
	}
	p.mem[pid] = 1
	return nil
}

func (p *pidBytes) close() error {
	if p == nil {
		return nil
	}
	if err := unix.Munmap(p.mem); err != nil {
		return fmt.Errorf("unmap a BPF map of pids: %w", err)
	}
	p.mem = nil
	return nil
}

// pidMark is pidmarks.h's enum pid_mark: what user space marked of a
// process.
type pidMark uint8

const (
	markCopy   pidMark = 1 // samples carry a stack copy (SetCopy)
	markGo     pidMark = 2 // go_procs may hold the process (SetGo)
	markPython pidMark = 4 // python_procs may hold it (SetPython)
)

// pidMarks is pid_marks of pidmarks.h. Each mark is changed by a
// read-modify-write of its pid's byte, under mu, as SetCopy, SetGo and
// SetPython may be called from several goroutines.
type pidMarks struct {
	mu    sync.Mutex
	bytes *pidBytes
}

// mapPidMarks maps m, the marks' array, into memory.
func mapPidMarks(m *ebpf.Map) (*pidMarks, error) {
	b, err := mapPidBytes(m)
	if err != nil {
		return nil, err
	}
	return &pidMarks{bytes: b}, nil
}

// set marks pid with mark, or (on false) takes the mark off.
func (m *pidMarks) set(pid uint32, mark pidMark, on bool) error {
	if err := checkPid(pid); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	b := &m.bytes.mem[pid]
	if on {
		*b |= byte(mark)
	} else {
		*b &^= byte(mark)
	}
	return nil
}

func (m *pidMarks) close() error {
	if m == nil {
		return nil
	}
	return m.bytes.close()
}
