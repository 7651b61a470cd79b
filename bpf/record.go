package bpf

import (
	"encoding/binary"
	"fmt"
	"unsafe"
)

// The record format written by sprof.bpf.c: a sprofSampleHeader, then
// KernelFrames kernel addresses, then UserFrames user addresses, each a u64
// in native byte order, then, with flagPython, a word giving the Python
// frame count and flags and two words per Python frame (python.bpf.h),
// then, with flagStackCopy, StackBytes bytes of the user stack from SP
// upward. The constants mirror the C enums of the same
// meaning (BTF does not carry unused enums, so bpf2go cannot generate them);
// the live tests fail if the two drift.
const (
	recordVersion = 3 // RECORD_VERSION

	flagUserTruncated      = 1 << 0 // SAMPLE_USER_TRUNCATED
	flagLeafReturn         = 1 << 1 // SAMPLE_LEAF_RETURN
	flagStackCopy          = 1 << 2 // SAMPLE_STACK_COPY
	flagStackCopyTruncated = 1 << 3 // SAMPLE_STACK_COPY_TRUNCATED
	flagStackCopyFault     = 1 << 4 // SAMPLE_STACK_COPY_FAULT
	flagPython             = 1 << 5 // SAMPLE_PYTHON
	flagUserTables         = 1 << 6 // SAMPLE_USER_TABLES
	flagGoroutine          = 1 << 7 // SAMPLE_GOROUTINE

	pythonCountMask = 0xffff  // the Python frame count in the Python part's first word
	pythonTruncated = 1 << 16 // PY_TRUNCATED
	pythonFresh     = 1 << 19 // PY_FRESH
	maxPythonFrames = 128     // PY_MAX_FRAMES
)

const (
	headerSize = int(unsafe.Sizeof(sprofSampleHeader{}))
	maxFrames  = len(sprofSampleBuf{}.Frames)
)

// Sample is one record from the ring buffer: a CPU sample, or with
// Config.OffCPU, a stretch of time a thread spent off the CPU.
type Sample struct {
	Time uint64 // CLOCK_MONOTONIC ns; for off-CPU records, when the thread ran again
	// OffCPU is nonzero for an off-CPU record: the thread was off the CPU
	// for this many nanoseconds before Time, and its stacks and registers
	// are those it left the CPU with. CPU then is the CPU it ran on again.
	OffCPU        uint64
	Pid, Tid, CPU uint32
	// The thread's name, NUL-terminated unless 16 bytes long, with NULs
	// after it: the same name, the same bytes.
	Comm [16]byte
	// The thread's user registers, also when the sample hit the kernel; zero
	// for kernel threads. FP is rbp on x86-64, x29 on arm64; LR (x30) is
	// arm64 only.
	PC, SP, FP, LR uint64
	// User holds return addresses leaf first, User[0] == PC; empty when user
	// stacks are not captured or the thread has no user context.
	User []uint64
	// Kernel holds kernel addresses leaf first; empty in user mode.
	Kernel []uint64
	// UserTruncated says the frame-pointer walk stopped at a frame record
	// that failed a check (or at 1024 frames): the root side is missing.
	// On arm64 it is also set when the caller of a leaf without a frame
	// record could not be told from LR: that frame may be missing.
	UserTruncated bool
	// UserTables says User came from the walk over unwind tables
	// (Config.UnwindTables); without UserTruncated it reached the
	// thread's outermost frame and the sample has no StackCopy.
	UserTables bool
	// Goroutine says the walk met Go's runtime.morestack and went on at
	// the goroutine whose stack grows (Sampler.SetGo): the frames after
	// morestack's are that goroutine's. A walk of a Go process through
	// morestack without it may lack frames there.
	Goroutine bool
	// LeafReturn says the sample hit a prologue or epilogue and User[1] is
	// the return address from the top of the stack (x86-64) or LR (arm64)
	// rather than from a frame record.
	LeafReturn bool
	// StackCopy holds the user stack from address SP upward, for unwinding
	// in user space; nil unless the process is marked for copies
	// (Sampler.SetCopy, Config.CopyAll) and the sample has user registers.
	// It stops at the end of the thread's stack (then it may be shorter
	// than Config.StackCopy) and is empty when nothing could be read.
	StackCopy []byte
	// StackCopyTruncated says the stack goes on above the copy: it is
	// deeper than Config.StackCopy, or StackCopyFault.
	StackCopyTruncated bool
	// Python holds the frames of a CPython process's sampled thread, two
	// words each, leaf first: the code object's address, with
	// cpython.EntryFlag in bit 0 on the first frame its
	// _PyEval_EvalFrameDefault call ran, and the address of its
	// instruction. Nil for other processes and threads that run no Python.
	Python []uint64
	// PythonTruncated says the Python chain was not followed to its end
	// (a read failed, or it is deeper than 128 frames).
	PythonTruncated bool
	// PythonFresh says the sampler has not been told of the code object
	// of the innermost Python frame (Python[0] without its entry bit):
	// the caller names it, or tries to, and tells it (PythonNamed).
	PythonFresh bool
	// StackCopyFault says reading the stack faulted (a page swapped out,
	// or a stack whose end the kernel could not look up): the copy is the
	// longest prefix that could be read, perhaps empty.
	StackCopyFault bool

	frames []uint64 // backing store for User and Kernel when the record is misaligned
}

// frameView returns the first n u64s of b: b itself reinterpreted when it is
// 8-byte aligned, as ring records copied by the ringbuf reader are (the
// frames sit at an 8-byte multiple in a heap buffer), else a copy in *buf.
func frameView(b []byte, n int, buf *[]uint64) []uint64 {
	if n == 0 {
		return nil
	}
	if uintptr(unsafe.Pointer(&b[0]))%8 == 0 {
		return unsafe.Slice((*uint64)(unsafe.Pointer(&b[0])), n)
	}
	if cap(*buf) < n {
		*buf = make([]uint64, maxFrames)
	}
	frames := (*buf)[:n]
	for i := range frames {
		frames[i] = binary.NativeEndian.Uint64(b[8*i:])
	}
	return frames
}

// RecordError reports a malformed ring-buffer record: where and what.
type RecordError struct {
	Off   int    // byte offset in the record
	Field string // the field that is wrong
	Msg   string
}

func (e *RecordError) Error() string {
	return fmt.Sprintf("bpf record: %s at byte %d: %s", e.Field, e.Off, e.Msg)
}

// decode fills s from raw, a record as a BPF program wrote it: a sample
// (sprof.bpf.c) or an off-CPU record (offcpu.bpf.c), told apart by the
// first u16. Each header is copied into its bpf2go-generated struct, so its
// layout is defined once, in the C source.
func (s *Sample) decode(raw []byte) error {
	if len(raw) >= 2 && binary.NativeEndian.Uint16(raw) == offCPURecordVersion {
		return s.decodeOffCPU(raw)
	}
	var h sprofSampleHeader
	if len(raw) < headerSize {
		return &RecordError{Off: 0, Field: "header", Msg: fmt.Sprintf("record has %d bytes, header needs %d", len(raw), headerSize)}
	}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&h)), headerSize), raw)
	if h.Version != recordVersion {
		return &RecordError{Off: int(unsafe.Offsetof(h.Version)), Field: "version", Msg: fmt.Sprintf("%d, want %d", h.Version, recordVersion)}
	}
	b := recordBody{headerSize: headerSize, kernel: int(h.KernelFrames), user: int(h.UserFrames),
		stackBytes: int(h.StackBytes), flags: h.Flags,
		framesOff: int(unsafe.Offsetof(h.UserFrames)), stackBytesOff: int(unsafe.Offsetof(h.StackBytes))}
	var python uint64
	if h.Flags&flagPython != 0 {
		at := headerSize + 8*(b.kernel+b.user)
		if b.kernel+b.user >= maxFrames {
			return &RecordError{Off: b.framesOff, Field: "frame counts",
				Msg: fmt.Sprintf("%d kernel + %d user frames leave no room for a Python part in %d words", b.kernel, b.user, maxFrames)}
		}
		if len(raw) < at+8 {
			return &RecordError{Off: len(raw), Field: "python frames",
				Msg: fmt.Sprintf("record has %d bytes, the Python part after %d frames needs %d", len(raw), b.kernel+b.user, at+8)}
		}
		python = binary.NativeEndian.Uint64(raw[at:])
		n := int(python & pythonCountMask)
		if n > maxPythonFrames || b.kernel+b.user+1+2*n > maxFrames {
			return &RecordError{Off: at, Field: "python frames", Msg: fmt.Sprintf("%d frames (at most %d, and %d words in all)", n, maxPythonFrames, maxFrames)}
		}
		b.python = 1 + 2*n
	}
	if err := s.decodeBody(raw, b); err != nil {
		return err
	}
	s.PythonTruncated = python&pythonTruncated != 0
	s.PythonFresh = python&pythonFresh != 0 && len(s.Python) > 0
	s.Time, s.OffCPU = h.Time, 0
	s.Pid, s.Tid, s.CPU = h.Pid, h.Tid, h.Cpu
	s.Comm = commOf(h.Comm)
	s.PC, s.SP, s.FP, s.LR = h.Pc, h.Sp, h.Fp, h.Lr
	return nil
}

// commOf is a record's comm with NULs after its first NUL. The programs
// copy the task's 16 bytes as they are where loads from the task are
// cheaper than the helper (see sample_with), and a kernel that renamed a
// thread with strlcpy, as older ones did, left what a longer earlier name
// had after the NUL; callers key aggregates by all 16 bytes.
func commOf(raw [16]int8) (comm [16]byte) {
	for i, c := range raw {
		if c == 0 {
			break
		}
		comm[i] = byte(c)
	}
	return comm
}

// recordBody is what both record kinds say about the frames and stack copy
// after their headers, with the header offsets of the fields for errors.
type recordBody struct {
	// python is the number of words of the Python part after the user
	// frames, 0 without one.
	headerSize, kernel, user, python, stackBytes int
	flags                                        uint16
	framesOff, stackBytesOff                     int
}

// decodeBody checks the frames and stack copy after a header against
// raw's length and sets the fields of s they give.
func (s *Sample) decodeBody(raw []byte, b recordBody) error {
	nk, nu := b.kernel, b.user
	if nk+nu > maxFrames {
		return &RecordError{Off: b.framesOff, Field: "frame counts",
			Msg: fmt.Sprintf("%d kernel + %d user frames exceed %d", nk, nu, maxFrames)}
	}
	framesEnd := b.headerSize + 8*(nk+nu+b.python)
	if len(raw) < framesEnd {
		return &RecordError{Off: len(raw), Field: "frames", Msg: fmt.Sprintf("record has %d bytes, %d frames and %d Python words need %d", len(raw), nk+nu, b.python, framesEnd)}
	}
	copied := b.flags&flagStackCopy != 0
	if nb := b.stackBytes; nb > MaxStackCopy || (!copied && nb != 0) {
		return &RecordError{Off: b.stackBytesOff, Field: "stack bytes",
			Msg: fmt.Sprintf("%d with stack-copy flag %v (at most %d)", nb, copied, MaxStackCopy)}
	}
	if need := framesEnd + b.stackBytes; len(raw) < need {
		return &RecordError{Off: len(raw), Field: "stack copy", Msg: fmt.Sprintf("record has %d bytes, %d-byte stack copy needs %d", len(raw), b.stackBytes, need)}
	}
	frames := frameView(raw[b.headerSize:], nk+nu+b.python, &s.frames)
	s.Kernel = frames[:nk:nk]
	s.User = frames[nk : nk+nu : nk+nu]
	s.Python = nil
	if b.python > 0 {
		s.Python = frames[nk+nu+1:]
	}
	s.UserTruncated = b.flags&flagUserTruncated != 0
	s.LeafReturn = b.flags&flagLeafReturn != 0
	s.UserTables = b.flags&flagUserTables != 0
	s.Goroutine = b.flags&flagGoroutine != 0
	s.StackCopy = nil
	if copied {
		s.StackCopy = raw[framesEnd : framesEnd+b.stackBytes : framesEnd+b.stackBytes]
	}
	s.StackCopyTruncated = b.flags&flagStackCopyTruncated != 0
	s.StackCopyFault = b.flags&flagStackCopyFault != 0
	s.PythonTruncated, s.PythonFresh = false, false
	return nil
}
