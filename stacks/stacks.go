package stacks

import (
	"fmt"
	"path/filepath"
	"time"
)

// MappingKind says what a Mapping stands for, so exporters can mark frames
// (kernel frames as `_[k]`, say) without guessing from file names.
type MappingKind uint8

const (
	// User is a file-backed executable mapping of a process.
	User MappingKind = iota
	// Kernel is the running kernel and its modules ([kernel.kallsyms]).
	Kernel
	// Unknown stands for addresses that fell in no known mapping (JIT code,
	// anonymous memory, a process that exited before it was read).
	Unknown
	// JIT is the code one process generated at run time (JavaScript,
	// Java, Python with -X perf), named from the perf map or jitdump the
	// runtime wrote (package symbolize/jit).
	JIT
	// Python is the Python code one CPython process runs: each Location
	// is one instruction of a code object, named from the interpreter's
	// memory (package symbolize/cpython).
	Python
)

func (k MappingKind) String() string {
	switch k {
	case User:
		return "user"
	case Kernel:
		return "kernel"
	case Unknown:
		return "unknown"
	case JIT:
		return "jit"
	case Python:
		return "python"
	}
	return fmt.Sprintf("MappingKind(%d)", uint8(k))
}

// KernelFile is the file name pprof and perf use for the kernel's mapping.
const KernelFile = "[kernel.kallsyms]"

// UnknownFile is the file name of the mapping that holds addresses found in
// no mapping of their process.
const UnknownFile = "[unknown]"

// JITFile is the file name of the mapping of process pid's generated
// code: one per process, since processes reuse each other's addresses.
func JITFile(pid uint32) string { return fmt.Sprintf("[jit pid %d]", pid) }

// PythonFile is the file name of the mapping of process pid's Python
// code: one per process, as code objects live at addresses of its own.
func PythonFile(pid uint32) string { return fmt.Sprintf("[python pid %d]", pid) }

// Mapping is one executable region: a file mapped into processes, the kernel,
// or the catch-all for unknown addresses. Several processes running the same
// binary at the same address share one Mapping.
type Mapping struct {
	Kind MappingKind
	// Start and Limit bound the runtime addresses [Start, Limit) and Offset
	// is the file offset mapped at Start, as /proc/PID/maps gives them.
	Start, Limit, Offset uint64
	// File is the path of the mapped file as the process sees it,
	// KernelFile for the kernel, UnknownFile for unknown addresses.
	File string
	// BuildID is the GNU build ID in lower-case hex, "" when the file has none.
	BuildID string
	// SymbolsTried is set once sprof looked the mapping's addresses up
	// (or found its file gone): what it left unnamed has no symbol to be
	// found, and a viewer need not look again (pprof's "Local
	// symbolization failed" for every deleted binary).
	SymbolsTried bool
}

// Name is the short name of the mapping's file, used for unsymbolized frames.
func (m *Mapping) Name() string {
	if m.Kind != User {
		return m.File
	}
	return filepath.Base(m.File)
}

// Frame is one level of a Location's inline stack: a function, and where in
// its source the address lies.
type Frame struct {
	// Function is the human-readable (demangled) name.
	Function string
	// SystemName is the name as the binary spells it (mangled), "" when it
	// equals Function.
	SystemName string
	// File and Line locate the address in source; zero when unknown.
	File string
	Line int
}

// Location is one address in one mapping together with the frames it
// symbolizes to. Frames holds the inline stack innermost first, so the last
// Frame is the function that physically contains Address; it is empty when
// no symbol covers the address.
type Location struct {
	Mapping *Mapping
	// Address is the runtime address. For frames other than the leaf it is
	// the return address, which points just after the call.
	Address uint64
	Frames  []Frame
}

// Symbolized reports whether the location has at least one frame name.
func (l *Location) Symbolized() bool { return len(l.Frames) > 0 }

// Placeholder is the name shown for an unsymbolized location:
// `file+0xoffset` with the offset into the mapped file, so the name stays
// the same wherever the loader put the file, or `[unknown]`.
func (l *Location) Placeholder() string {
	m := l.Mapping
	if m == nil || m.Kind == Unknown {
		return fmt.Sprintf("[unknown] 0x%x", l.Address)
	}
	if m.Kind == Kernel {
		return fmt.Sprintf("[kernel] 0x%x", l.Address)
	}
	if m.Kind == JIT {
		return fmt.Sprintf("[jit] 0x%x", l.Address)
	}
	if m.Kind == Python {
		return fmt.Sprintf("[python] 0x%x", l.Address)
	}
	return fmt.Sprintf("%s+0x%x", m.Name(), l.Address-m.Start+m.Offset)
}

// Sample is a call stack observed Count times in one thread by CPU
// sampling, and for OffCPU in all by off-CPU recording.
type Sample struct {
	// Stack lists the locations leaf first: kernel frames (if any) come
	// before user frames, as the CPU saw them.
	Stack []*Location
	Count int64
	// OffCPU is the time the thread spent off the CPU (blocked, asleep,
	// preempted) with this stack; 0 in profiles without off-CPU records.
	OffCPU time.Duration
	Pid    uint32
	Tid    uint32
	Comm   string
	// Container is the ID of the container the process runs in, as its
	// runtime names it (Docker's, containerd's, CRI-O's or Podman's 64 hex
	// digits), read from the process's cgroup; "" when the process runs in
	// no container sprof recognises (see package collector/container). It is a
	// property of the process, the same for all of its samples.
	Container string
	// Truncated is set when the stack walk stopped before the outermost
	// frame (a bad frame pointer, the depth limit). The frames it has are
	// real; exporters show the gap as a `[truncated]` root frame.
	Truncated bool
}

// Profile is a set of samples taken over one interval at one frequency.
type Profile struct {
	Start    time.Time
	Duration time.Duration
	// Period is the sampling period of the cpu-clock event: 1s / frequency;
	// 0 when the profile has only off-CPU time (no CPU sampling).
	Period time.Duration
	// OffCPU says the samples carry off-CPU time (Sample.OffCPU), the
	// off-CPU records of waits of at least the recording's minimum.
	OffCPU bool
	// Mappings lists every Mapping that a Location of Samples refers to.
	Mappings []*Mapping
	Samples  []*Sample
	// Lost counts samples the kernel could not hand over (a full ring
	// buffer); they are in no Sample.
	Lost uint64
}
