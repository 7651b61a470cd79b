package bpf

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// pidLimit is the number of pids the filter and the marks cover,
// PID_LIMIT of pidset.h: every pid a 64-bit kernel can hand out
// (PID_MAX_LIMIT).
const pidLimit = 4 << 20

// pidBytes is one of the BPF programs' arrays of a byte per pid (pidset.h:
// the pid filter, the marks), written through a memory map of the array:
// the programs' fork and exit hooks store bytes into it meanwhile, and a
// store of a whole 4 KiB chunk through the bpf syscall would undo theirs
// in its chunk. Its methods may be called from several goroutines, and
// after close, which they then fail with os.ErrClosed: the collector
// unmarks the processes it still follows when it closes, after the
// Sampler.
type pidBytes struct {
	mu  sync.Mutex // serializes changes, the marks' read-modify-writes and close
	mem []byte     // one byte per pid; nil once closed
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

// update replaces pid's byte b with to(b).
func (p *pidBytes) update(pid uint32, to func(b byte) byte) error {
	if err := checkPid(pid); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mem == nil {
		return fmt.Errorf("pid %d: BPF map of pids: %w", pid, os.ErrClosed)
	}
	p.mem[pid] = to(p.mem[pid])
	return nil
}

// add puts pid in the set, the pid filter (pids of pidset.h).
func (p *pidBytes) add(pid uint32) error {
	return p.update(pid, func(byte) byte { return 1 })
}

// pidMark is pidmarks.h's enum pid_mark: what user space marked of a
// process in the marks (pid_marks).
type pidMark uint8

const (
	markCopy   pidMark = 1 // samples carry a stack copy (SetCopy)
	markGo     pidMark = 2 // go_procs may hold the process (SetGo)
	markPython pidMark = 4 // python_procs may hold it (SetPython)
)

// mark marks pid with m in the marks, or (on false) takes the mark off,
// leaving its other marks as they are.
func (p *pidBytes) mark(pid uint32, m pidMark, on bool) error {
	return p.update(pid, func(b byte) byte {
		if on {
			return b | byte(m)
		}
		return b &^ byte(m)
	})
}

// describeProcess marks pid with mark and puts v, what the programs read
// of the process, under pid in procs, the map the mark is the hint of
// (go_procs, python_procs).
func (s *Sampler) describeProcess(procs *ebpf.Map, mark pidMark, pid uint32, v any) error {
	if err := s.marks.mark(pid, mark, true); err != nil {
		return err
	}
	return procs.Update(pid, v, ebpf.UpdateAny)
}

// forgetProcess takes mark off pid and pid out of procs.
func (s *Sampler) forgetProcess(procs *ebpf.Map, mark pidMark, pid uint32) error {
	if err := s.marks.mark(pid, mark, false); err != nil {
		return err
	}
	if err := procs.Delete(pid); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	return nil
}

// close unmaps the array; again, it does nothing.
func (p *pidBytes) close() error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mem == nil {
		return nil
	}
	if err := unix.Munmap(p.mem); err != nil {
		return fmt.Errorf("unmap a BPF map of pids: %w", err)
	}
	p.mem = nil
	return nil
}
