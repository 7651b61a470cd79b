package bpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/sprof/sprof/symbolize/cpython"
)

// ErrNoPython is wrapped by SetPython's error when the Sampler was opened
// without Config.Python.
var ErrNoPython = errors.New("Python frames not enabled")

// pyNoField is python.bpf.h's PY_NO_FIELD.
const pyNoField = 0xffff

// maxPyFrameField bounds the offsets of frame fields: the sampler reads
// PY_FRAME_READ (80) bytes of each frame.
const maxPyFrameField = 80 - 8

// SetPython has the samples of process pid (a tgid) carry the Python
// frames of the sampled thread (Sample.Python), read where p's layout
// says; a nil p stops that. The caller removes the mark when the process
// exits: left, it matches nothing until the pid is reused, and a reused
// pid's samples carry at most a truncated Python part.
func (s *Sampler) SetPython(pid uint32, p *cpython.Process) error {
	if !s.python {
		return fmt.Errorf("python frames of pid %d: %w (opened with Config.Python false)", pid, ErrNoPython)
	}
	if p == nil {
		if err := s.objs.PythonProcs.Delete(pid); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("python frames of pid %d: %w", pid, err)
		}
		return nil
	}
	v, err := pyProc(p)
	if err != nil {
		return fmt.Errorf("python frames of pid %d: %w", pid, err)
	}
	if err := s.objs.PythonProcs.Update(pid, &v, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("python frames of pid %d: %w", pid, err)
	}
	return nil
}

// pyProc is p as python.bpf.h's struct py_proc.
func pyProc(p *cpython.Process) (sprofPyProc, error) {
	l := &p.Layout
	var err error
	off := func(o, limit uint64) uint16 {
		switch {
		case o == cpython.NoField:
			return pyNoField
		case o > limit && err == nil:
			err = fmt.Errorf("python %v layout: offset %d beyond %d", p.Version, o, limit)
		}
		return uint16(o)
	}
	v := sprofPyProc{
		InterpHead:        p.Runtime + l.RuntimeInterpretersHead,
		InterpThreadsHead: off(l.InterpThreadsHead, pyNoField-1),
		ThreadNext:        off(l.ThreadNext, pyNoField-1),
		ThreadNativeId:    off(l.ThreadNativeID, pyNoField-1),
		ThreadFrame:       off(l.ThreadFrame, pyNoField-1),
		CframeFrame:       off(l.CFrameCurrentFrame, pyNoField-1),
		FramePrevious:     off(l.FramePrevious, maxPyFrameField),
		FrameCode:         off(l.FrameCode, maxPyFrameField),
		FrameInstr:        off(l.FrameInstr, maxPyFrameField),
		FrameOwner:        off(l.FrameOwner, maxPyFrameField),
		FrameIsEntry:      off(l.FrameIsEntry, maxPyFrameField),
		OwnedByCstack:     l.OwnedByCStack,
	}
	return v, err
}
