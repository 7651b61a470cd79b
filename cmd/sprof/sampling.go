package main

import (
	"cmp"
	"time"

	"github.com/spf13/pflag"

	"github.com/sprof/sprof/bpf"
	"github.com/sprof/sprof/pipeline"
)

// samplingFlags are the flags that say how stacks are sampled and
// unwound, which record and agent share, so that both sample alike.
type samplingFlags struct {
	userOnly, kernelOnly bool
	offCPU               bool          // also record waits off the CPU
	offCPUMin            time.Duration // the shortest wait recorded
	offCPUBudget         int           // system calls a second the sys_exit hook may follow; 0 no limit
	ringBuffer           int
	stackCopy            int
	unwind               string
	unwindTables         int
	unwindCache          int
	debugUnwind          bool
	python               bool // name the Python frames of CPython processes
}

// tablesFallback is what record and agent say when --unwind auto opened
// the sampler without unwind tables (pipeline.Pipeline.TablesErr says why).
const tablesFallback = "--unwind auto: no unwind tables in the kernel, stacks without frame pointers are copied (--stack-copy)"

// add defines the flags on fs; unwindCache is --unwind-cache's default
// and offCPUUsage --off-cpu's help, which says what the command makes of
// the waits.
func (f *samplingFlags) add(fs *pflag.FlagSet, unwindCache int, offCPUUsage string) {
	fs.BoolVarP(&f.userOnly, "user-only", "U", false, "user stacks only")
	fs.BoolVarP(&f.kernelOnly, "kernel-only", "K", false, "kernel stacks only; samples taken in user mode show as "+userModeFrame)
	fs.BoolVar(&f.offCPU, "off-cpu", false, offCPUUsage)
	f.offCPUMin = bpf.DefaultOffCPUMin
	fs.Var((*durationValue)(&f.offCPUMin), "off-cpu-min", "the shortest wait --off-cpu records (1ms, 100us): shorter ones cost less and are not counted")
	fs.IntVar(&f.offCPUBudget, "off-cpu-syscall-budget", bpf.DefaultOffCPUExitBudget, "with --off-cpu, the system calls a second on the busiest CPU up to which waits in system calls get their whole user stack, read by a hook on every system call's exit (150-300 ns each on a virtual machine); above it the hook goes off for 15s and such waits show the calling function alone (--stats counts them); 0 = no limit, the hook always on")
	f.stackCopy = pipeline.DefaultStackCopy
	fs.Var((*sizeValue)(&f.stackCopy), "stack-copy", "bytes of user stack copied per sample of processes with code that may lack frame pointers, unwound in sprof with .sframe or .eh_frame (up to 64K): with --unwind auto only until the code's table is in the kernel; 0 = no copies")
	fs.StringVar(&f.unwind, "unwind", "auto", "where stacks of code without frame pointers (most libraries) are unwound: bpf = the real stack walked in the kernel over each binary's unwind table (built from .sframe or .eh_frame, loaded once per binary into --unwind-tables of kernel memory): whole stacks at any depth, no copies, but a new binary's frames end a stack (marked truncated) until its table is loaded, a fraction of a second; copy = a copy of the stack's top (--stack-copy bytes) unwound in sprof, frames above it lost; auto = bpf where tables are loaded, copy until then, and copy alone where the kernel cannot hold tables or is older than 5.17 (said at start)")
	f.unwindTables = bpf.DefaultUnwindTables
	fs.Var((*sizeValue)(&f.unwindTables), "unwind-tables", "kernel memory for the unwind tables of --unwind bpf and auto (libLLVM's table takes about 10M, libc's 0.3M); preallocated; the tables used least recently are evicted when over it and loaded again, without a rebuild, when a walk ends in their binary; both counted in --stats")
	f.unwindCache = unwindCache
	fs.Var((*sizeValue)(&f.unwindCache), "unwind-cache", "memory for the unwind tables of binaries without frame pointers (libc's takes about 1M, a large C++ program's tens); the least recently used are dropped when over it")
	fs.BoolVar(&f.python, "python", true, "show the Python functions of CPython 3.9-3.13 processes (read from the interpreter's memory), spliced into their native stacks at _PyEval_EvalFrameDefault; --python=false shows the interpreter's C frames only")
	fs.BoolVar(&f.debugUnwind, "debug-unwind", false, "count per binary how many frames each unwinding method found and why unwinds stopped (record prints it at the end, agent logs it every interval)")
	fs.Var((*sizeValue)(&f.ringBuffer), "ring-buffer", "BPF ring buffer size, a power of two (64K, 8M); 0 = rate × CPUs × record size for 250-500ms, or with --stack-copy 64-128ms: small enough to stay in the CPU caches, drained when a quarter full")
}

// check checks the values given on fs, and turns stack copies off where
// there are no user stacks to copy.
func (f *samplingFlags) check(fs *pflag.FlagSet) error {
	if f.userOnly && f.kernelOnly {
		return usagef("--user-only and --kernel-only exclude each other; give at most one")
	}
	if fs.Changed("off-cpu-min") && !f.offCPU {
		return usagef("--off-cpu-min needs --off-cpu")
	}
	if f.offCPUMin <= 0 {
		return usagef("--off-cpu-min must be positive")
	}
	if fs.Changed("off-cpu-syscall-budget") && !f.offCPU {
		return usagef("--off-cpu-syscall-budget needs --off-cpu")
	}
	if f.offCPUBudget < 0 {
		return usagef("--off-cpu-syscall-budget %d: give 0 (no limit) or more", f.offCPUBudget)
	}
	if f.stackCopy > bpf.MaxStackCopy {
		return usagef("--stack-copy %d: at most %d bytes", f.stackCopy, bpf.MaxStackCopy)
	}
	if f.kernelOnly {
		f.stackCopy = 0
	}
	if _, err := pipeline.ParseUnwind(f.unwind); err != nil {
		return usagef("--%v", err)
	}
	if fs.Changed("unwind-tables") && f.unwind == "copy" {
		return usagef("--unwind-tables needs --unwind bpf or auto")
	}
	if f.unwindTables < 1<<20 {
		return usagef("--unwind-tables %d: give at least 1M", f.unwindTables)
	}
	if f.unwindCache < 1<<20 {
		return usagef("--unwind-cache %d: give at least 1M", f.unwindCache)
	}
	if f.ringBuffer != 0 && (f.ringBuffer < 4096 || f.ringBuffer&(f.ringBuffer-1) != 0) {
		return usagef("--ring-buffer %d: must be a power of two of at least 4K", f.ringBuffer)
	}
	return nil
}

// config returns the pipeline.Config of the flags, sampling at hz (0 with
// --off-cpu: off-CPU records only).
func (f *samplingFlags) config(hz int) pipeline.Config {
	unwind, _ := pipeline.ParseUnwind(f.unwind) // checked
	return pipeline.Config{
		Frequency:      hz,
		User:           !f.kernelOnly,
		Kernel:         !f.userOnly,
		OffCPU:         f.offCPU,
		OffCPUMin:      f.offCPUMin,
		OffCPUBudget:   cmp.Or(f.offCPUBudget, -1), // the pipeline's 0 is the default
		RingBufferSize: f.ringBuffer,
		StackCopy:      f.stackCopy,
		Unwind:         unwind,
		UnwindTables:   int64(f.unwindTables),
		UnwindCache:    int64(f.unwindCache),
		DebugUnwind:    f.debugUnwind,
		Python:         f.python,
	}
}
