package main

import (
	"github.com/spf13/pflag"

	"github.com/sprof/sprof/bpf"
	"github.com/sprof/sprof/pipeline"
)

// samplingFlags are the flags that say how stacks are sampled and
// unwound, which record and agent share, so that both sample alike.
type samplingFlags struct {
	userOnly, kernelOnly bool
	ringBuffer           int
	stackCopy            int
	unwindCache          int
	debugUnwind          bool
}

// add defines the flags on fs; unwindCache is --unwind-cache's default.
func (f *samplingFlags) add(fs *pflag.FlagSet, unwindCache int) {
	fs.BoolVarP(&f.userOnly, "user-only", "U", false, "user stacks only")
	fs.BoolVarP(&f.kernelOnly, "kernel-only", "K", false, "kernel stacks only; samples taken in user mode show as "+userModeFrame)
	f.stackCopy = pipeline.DefaultStackCopy
	fs.Var((*sizeValue)(&f.stackCopy), "stack-copy", "bytes of user stack copied per sample of processes with code that may lack frame pointers, unwound with .sframe or .eh_frame (up to 64K); 0 = frame pointers only")
	f.unwindCache = unwindCache
	fs.Var((*sizeValue)(&f.unwindCache), "unwind-cache", "memory for the unwind tables of binaries without frame pointers (libc's takes about 1M, a large C++ program's tens); the least recently used are dropped when over it")
	fs.BoolVar(&f.debugUnwind, "debug-unwind", false, "count per binary how many frames each unwinding method found and why unwinds stopped (record prints it at the end, agent logs it every interval)")
	fs.Var((*sizeValue)(&f.ringBuffer), "ring-buffer", "BPF ring buffer size, a power of two (64K, 8M); 0 = rate × CPUs × record size for 1s, or with --stack-copy 64-128ms: small enough to stay in the CPU caches, drained when a quarter full")
}

// check checks the values given, and turns stack copies off where there
// are no user stacks to copy.
func (f *samplingFlags) check() error {
	if f.userOnly && f.kernelOnly {
		return usagef("--user-only and --kernel-only exclude each other; give at most one")
	}
	if f.stackCopy > bpf.MaxStackCopy {
		return usagef("--stack-copy %d: at most %d bytes", f.stackCopy, bpf.MaxStackCopy)
	}
	if f.kernelOnly {
		f.stackCopy = 0
	}
	if f.unwindCache < 1<<20 {
		return usagef("--unwind-cache %d: give at least 1M", f.unwindCache)
	}
	if f.ringBuffer != 0 && (f.ringBuffer < 4096 || f.ringBuffer&(f.ringBuffer-1) != 0) {
		return usagef("--ring-buffer %d: must be a power of two of at least 4K", f.ringBuffer)
	}
	return nil
}

// config returns the pipeline.Config of the flags, sampling at hz.
func (f *samplingFlags) config(hz int) pipeline.Config {
	return pipeline.Config{
		Frequency:      hz,
		User:           !f.kernelOnly,
		Kernel:         !f.userOnly,
		RingBufferSize: f.ringBuffer,
		StackCopy:      f.stackCopy,
		UnwindCache:    int64(f.unwindCache),
		DebugUnwind:    f.debugUnwind,
	}
}
