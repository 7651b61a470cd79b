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

// maxPyFrameRead is python.bpf.h's PY_FRAME_READ_MAX: the most bytes of
// each frame the sampler reads, which bounds the offsets of frame fields.
const maxPyFrameRead = 128

// maxPyNamed is py_named's size with Config.Python: the code objects user
// space has named, of all processes, that samples find without waking the
// reader (PythonNamed). 1.4 MB of kernel memory, preallocated (`bpftool
// map` memlock for 16,384 entries of a 16-byte key and a 1-byte value).
const maxPyNamed = 16384

// PythonNamed tells the sampler that the caller has read the name of code
// object code of Python process pid (Sample.Python's code address, without
// its entry bit), or tried to. Until then a sample whose innermost Python
// frame runs it is marked PythonFresh and wakes the reader (Ready) at once,
// at most every 10 ms, so that the name is read while the process still
// runs, not at a drain after it exited. The sampler holds maxPyNamed code
// objects and forgets the least recently run: a sample marked PythonFresh
// asks to be told again. Told twice, it does no harm; after Close it
// returns an error.
func (s *Sampler) PythonNamed(pid uint32, code uint64) error {
	if !s.python {
		return fmt.Errorf("python code object %#x of pid %d: %w", code, pid, ErrNoPython)
	}
	if err := s.objs.PyNamed.Update(sprofPyCodeKey{Pid: pid, Code: code}, uint8(1), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("python code object %#x of pid %d: %w", code, pid, err)
	}
	return nil
}

// SetPython has the samples of process pid (a tgid) carry the Python
// frames of the sampled thread (Sample.Python), read where p's layout
// says; a nil p stops that. The caller removes the mark when the process
// exits: left, it matches nothing until the pid is reused, and a reused
// pid's samples carry at most a truncated Python part.
func (s *Sampler) SetPython(pid uint32, p *cpython.Process) error {
	if !s.python {
		return fmt.Errorf("python frames of pid %d: %w (opened with Config.Python false)", pid, ErrNoPython)
	}
	var err error
	if p == nil {
		err = s.forgetProcess(s.objs.PythonProcs, markPython, pid)
	} else {
		var v sprofPyProc
		if v, err = pyProc(p); err == nil {
			err = s.describeProcess(s.objs.PythonProcs, markPython, pid, &v)
		}
	}
	if err != nil {
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
	span := l.FrameSpan()
	if span > maxPyFrameRead {
		return sprofPyProc{}, fmt.Errorf("python %v layout: frame fields span %d bytes, beyond %d", p.Version, span, maxPyFrameRead)
	}
	pthreadTID := uint64(cpython.NoField)
	if l.ThreadPthread {
		pthreadTID = p.PthreadTID
	}
	v := sprofPyProc{
		InterpHead:        p.Runtime + l.RuntimeInterpretersHead,
		InterpThreadsHead: off(l.InterpThreadsHead, pyNoField-1),
		ThreadNext:        off(l.ThreadNext, pyNoField-1),
		ThreadNativeId:    off(l.ThreadNativeID, pyNoField-1),
		ThreadFrame:       off(l.ThreadFrame, pyNoField-1),
		CframeFrame:       off(l.CFrameCurrentFrame, pyNoField-1),
		FramePrevious:     off(l.FramePrevious, span-8),
		FrameCode:         off(l.FrameCode, span-8),
		FrameInstr:        off(l.FrameInstr, span-8),
		FrameOwner:        off(l.FrameOwner, span-8),
		FrameIsEntry:      off(l.FrameIsEntry, span-8),
		PthreadTid:        off(pthreadTID, pyNoField-1),
		OwnedByCstack:     l.OwnedByCStack,
		FrameRead:         uint8(span),
	}
	if l.FrameLastiUnit != 0 {
		v.FrameObjects = 1
	}
	return v, err
}
