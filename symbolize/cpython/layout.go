package cpython

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// Version is a CPython release line, 3.Minor.
type Version struct{ Major, Minor int }

func (v Version) String() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// NoField is the offset of a field a version does not have.
const NoField = ^uint64(0)

// ErrUnsupported is wrapped by the error for a Python whose frames sprof
// cannot read: a version without a layout, or published offsets that are
// not sane.
var ErrUnsupported = errors.New("unsupported Python")

// Layout is where an interpreter keeps the fields sprof reads, each in
// bytes from the start of its structure (x86-64 and arm64 agree: both are
// LP64 with the same alignment rules).
type Layout struct {
	// _PyRuntime.interpreters.head: the main interpreter.
	RuntimeInterpretersHead uint64
	// PyInterpreterState.threads.head: its newest thread.
	InterpThreadsHead uint64
	// PyThreadState: the next thread, the thread's kernel thread id, and
	// where its current frame is: ThreadFrame points to a _PyCFrame whose
	// field CFrameCurrentFrame is the frame (3.11, 3.12), or is the frame
	// itself (CFrameCurrentFrame NoField, 3.9, 3.10, 3.13).
	ThreadNext, ThreadNativeID, ThreadFrame, CFrameCurrentFrame uint64
	// ThreadPthread says that ThreadNativeID is the thread's pthread_t
	// (thread_id, 3.9 and 3.10 have no native_thread_id): the kernel's
	// id is in libc's struct pthread it points to, at Process.PthreadTID.
	ThreadPthread bool
	// The frame: the caller's frame, the code object, the instruction,
	// and the frame's owner (NoField before 3.11). From 3.11 frames are
	// _PyInterpreterFrames and the instruction is an address (prev_instr
	// before 3.13, instr_ptr from 3.13: both give the instruction
	// executing, see Reader.Frame). 3.9 and 3.10 keep PyFrameObjects, each
	// run by a _PyEval_EvalFrameDefault call of its own, whose instruction
	// is f_lasti, an int index in units of FrameLastiUnit bytes (1 in 3.9,
	// 2 in 3.10; 0 from 3.11).
	FramePrevious, FrameCode, FrameInstr, FrameOwner uint64
	FrameLastiUnit                                   uint64
	// FrameIsEntry is 3.11's flag for the first frame a
	// _PyEval_EvalFrameDefault call runs; NoField later, where such a call
	// instead links its first frame to a shim frame owned by the C stack,
	// whose owner is OwnedByCStack.
	FrameIsEntry  uint64
	OwnedByCStack uint8
	// PyCodeObject. The instructions are inline from CodeAdaptive on
	// (3.11 and later), or in the bytes object at CodeCode (co_code, 3.9
	// and 3.10); the other is NoField. CodeLinetable is co_lnotab in 3.9,
	// co_linetable later, each in its version's format (linetable.go).
	// CodeQualname is NoField before 3.11: frames are named by co_name.
	CodeFilename, CodeName, CodeQualname, CodeLinetable, CodeFirstLineno, CodeAdaptive, CodeCode uint64
	// PyObject.ob_type.
	ObType uint64
	// PyUnicodeObject: the state bits, the length in code points, and the
	// sizes of the compact ASCII and compact headers the characters follow.
	UnicodeState, UnicodeLength, ASCIISize, CompactSize uint64
	// PyBytesObject: ob_size and ob_sval.
	BytesSize, BytesData uint64
}

// frameSpan bounds the frame fields of _Py_DebugOffsets: the sampler copies
// this many bytes of each _PyInterpreterFrame at once (bpf/python.bpf.h),
// and more of a PyFrameObject only (FrameSpan).
const frameSpan = 80

// FrameSpan is the number of bytes of each frame the sampler reads at once
// to find the fields it uses.
func (l *Layout) FrameSpan() uint64 {
	span := uint64(frameSpan)
	for _, off := range []uint64{l.FramePrevious, l.FrameCode, l.FrameInstr, l.FrameOwner, l.FrameIsEntry} {
		if off != NoField && off+8 > span {
			span = off + 8
		}
	}
	return span
}

// maxOffset bounds every other offset: the sampler keeps them in 16 bits.
const maxOffset = 1<<16 - 1

// tableLayouts holds the layouts of the versions that do not publish
// theirs, from their headers (Include/internal/pycore_*.h), checked against
// DWARF by TestLayoutsMatchDWARF.
var tableLayouts = map[Version]Layout{
	{3, 9}:  frameObjects(104, 1),
	{3, 10}: frameObjects(96, 2),
	{3, 11}: {
		RuntimeInterpretersHead: 40,
		InterpThreadsHead:       16,
		ThreadNext:              8, ThreadNativeID: 160, ThreadFrame: 56, CFrameCurrentFrame: 8,
		FramePrevious: 48, FrameCode: 32, FrameInstr: 56, FrameOwner: 69, FrameIsEntry: 68,
		OwnedByCStack: 0xff, // 3.11 marks entry frames with is_entry
		CodeFilename:  112, CodeName: 120, CodeQualname: 128, CodeLinetable: 136, CodeFirstLineno: 72,
		CodeAdaptive: 184, CodeCode: NoField,
		ObType:       8,
		UnicodeState: 32, UnicodeLength: 16, ASCIISize: 48, CompactSize: 72,
		BytesSize: 16, BytesData: 32,
	},
	{3, 12}: {
		RuntimeInterpretersHead: 40,
		InterpThreadsHead:       72,
		ThreadNext:              8, ThreadNativeID: 144, ThreadFrame: 56, CFrameCurrentFrame: 0,
		FramePrevious: 8, FrameCode: 0, FrameInstr: 56, FrameOwner: 70, FrameIsEntry: NoField,
		OwnedByCStack: 3, // FRAME_OWNED_BY_CSTACK
		CodeFilename:  112, CodeName: 120, CodeQualname: 128, CodeLinetable: 136, CodeFirstLineno: 68,
		CodeAdaptive: 192, CodeCode: NoField,
		ObType:       8,
		UnicodeState: 32, UnicodeLength: 16, ASCIISize: 40, CompactSize: 56,
		BytesSize: 16, BytesData: 32,
	},
}

// frameObjects is the layout of 3.9 and 3.10, which keep frames as
// PyFrameObjects: they differ only in where f_lasti is (lasti) and in
// what it counts (unit bytes).
func frameObjects(lasti, unit uint64) Layout {
	return Layout{
		RuntimeInterpretersHead: 32,
		InterpThreadsHead:       8,
		ThreadNext:              8, ThreadNativeID: 176, ThreadPthread: true, ThreadFrame: 24, CFrameCurrentFrame: NoField,
		FramePrevious: 24, FrameCode: 32, FrameInstr: lasti, FrameOwner: NoField, FrameIsEntry: NoField,
		FrameLastiUnit: unit,
		CodeFilename:   104, CodeName: 112, CodeQualname: NoField, CodeLinetable: 120, CodeFirstLineno: 40,
		CodeAdaptive: NoField, CodeCode: 48,
		ObType:       8,
		UnicodeState: 32, UnicodeLength: 16, ASCIISize: 48, CompactSize: 72,
		BytesSize: 16, BytesData: 32,
	}
}

// tableLayout returns the layout of version v from the table.
func tableLayout(v Version) (Layout, error) {
	l, ok := tableLayouts[v]
	if !ok {
		return Layout{}, fmt.Errorf("%w: Python %v has no layout table and publishes no _Py_DebugOffsets", ErrUnsupported, v)
	}
	return l, nil
}

// DebugOffsetsSize is the size of 3.13's _Py_DebugOffsets, which
// _PyRuntime starts with.
const DebugOffsetsSize = 584

// debugCookie starts _Py_DebugOffsets.
var debugCookie = []byte("xdebugpy")

// Fields of 3.13's _Py_DebugOffsets (Include/internal/pycore_runtime.h),
// each a u64 at this offset. Later versions add fields and move these;
// parseDebugOffsets accepts 3.13 only.
const (
	dbgVersion                = 8
	dbgFreeThreaded           = 16
	dbgRuntimeInterpreters    = 40
	dbgInterpThreadsHead      = 72
	dbgThreadNext             = 168
	dbgThreadCurrentFrame     = 184
	dbgThreadNativeID         = 200
	dbgFramePrevious          = 232
	dbgFrameExecutable        = 240
	dbgFrameInstrPtr          = 248
	dbgFrameOwner             = 264
	dbgCodeFilename           = 280
	dbgCodeName               = 288
	dbgCodeQualname           = 296
	dbgCodeLinetable          = 304
	dbgCodeFirstLineno        = 312
	dbgCodeAdaptive           = 344
	dbgObType                 = 360
	dbgBytesSize              = 520
	dbgBytesData              = 528
	dbgUnicodeState           = 544
	dbgUnicodeLength          = 552
	dbgUnicodeASCIIObjectSize = 560
)

// parseDebugOffsets reads the layout of version v from raw, the first
// DebugOffsetsSize bytes of the process's _PyRuntime, in the process's
// byte order. The cookie, the version it states and every offset are
// checked: the bytes come from the process.
func parseDebugOffsets(raw []byte, v Version, order binary.ByteOrder) (Layout, error) {
	if len(raw) < DebugOffsetsSize {
		return Layout{}, fmt.Errorf("_Py_DebugOffsets: %d bytes, want %d", len(raw), DebugOffsetsSize)
	}
	if !bytes.Equal(raw[:len(debugCookie)], debugCookie) {
		return Layout{}, fmt.Errorf("_Py_DebugOffsets: cookie %q at offset 0, want %q", raw[:len(debugCookie)], debugCookie)
	}
	hex := order.Uint64(raw[dbgVersion:])
	if got := (Version{int(hex >> 24 & 0xff), int(hex >> 16 & 0xff)}); got != v || v != (Version{3, 13}) {
		return Layout{}, fmt.Errorf("%w: _Py_DebugOffsets states version %#x at offset %d; sprof reads the layout of 3.13 only, in a %v interpreter",
			ErrUnsupported, hex, dbgVersion, v)
	}
	if order.Uint64(raw[dbgFreeThreaded:]) != 0 {
		return Layout{}, fmt.Errorf("%w: free-threaded build (offset %d)", ErrUnsupported, dbgFreeThreaded)
	}
	var err error
	field := func(at int, limit uint64) uint64 {
		off := order.Uint64(raw[at:])
		if off+8 > limit && err == nil {
			err = fmt.Errorf("_Py_DebugOffsets: field at offset %d is %d, beyond %d", at, off, limit)
		}
		return off
	}
	l := Layout{
		RuntimeInterpretersHead: field(dbgRuntimeInterpreters, maxOffset),
		InterpThreadsHead:       field(dbgInterpThreadsHead, maxOffset),
		ThreadNext:              field(dbgThreadNext, maxOffset),
		ThreadNativeID:          field(dbgThreadNativeID, maxOffset),
		ThreadFrame:             field(dbgThreadCurrentFrame, maxOffset),
		CFrameCurrentFrame:      NoField,
		FramePrevious:           field(dbgFramePrevious, frameSpan),
		FrameCode:               field(dbgFrameExecutable, frameSpan),
		FrameInstr:              field(dbgFrameInstrPtr, frameSpan),
		FrameOwner:              field(dbgFrameOwner, frameSpan),
		FrameIsEntry:            NoField,
		OwnedByCStack:           3, // FRAME_OWNED_BY_CSTACK in 3.13
		CodeFilename:            field(dbgCodeFilename, maxOffset),
		CodeName:                field(dbgCodeName, maxOffset),
		CodeQualname:            field(dbgCodeQualname, maxOffset),
		CodeLinetable:           field(dbgCodeLinetable, maxOffset),
		CodeFirstLineno:         field(dbgCodeFirstLineno, maxOffset),
		CodeAdaptive:            field(dbgCodeAdaptive, maxOffset),
		CodeCode:                NoField,
		ObType:                  field(dbgObType, maxOffset),
		BytesSize:               field(dbgBytesSize, maxOffset),
		BytesData:               field(dbgBytesData, maxOffset),
		UnicodeState:            field(dbgUnicodeState, maxOffset),
		UnicodeLength:           field(dbgUnicodeLength, maxOffset),
		ASCIISize:               field(dbgUnicodeASCIIObjectSize, maxOffset),
	}
	// PyCompactUnicodeObject adds utf8_length and utf8 to PyASCIIObject.
	l.CompactSize = l.ASCIISize + 16
	if err != nil {
		return Layout{}, err
	}
	return l, nil
}
