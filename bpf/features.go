package bpf

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// Feature is one thing of the kernel the sampler's BPF programs use: a
// program type, a map type or a helper. Each is probed the way the verifier
// will judge sprof's own programs (a helper in a perf_event program, a
// BTF tracepoint on the hook sprof attaches to), not read off the kernel
// version, because distributions backport and disable BPF features.
type Feature int

// The features, oldest first. Since names the first mainline kernel with
// each (Feature.Since).
const (
	FeatureBTF              Feature = iota // kernel BTF, /sys/kernel/btf/vmlinux: CO-RE and tp_btf
	FeaturePerfEvent                       // perf_event BPF programs
	FeatureTracingBTF                      // BTF tracepoints (tp_btf), for process fork and exit
	FeatureRingBuf                         // BPF ring buffers, and bpf_ringbuf_query
	FeatureCurrentTaskBTF                  // bpf_get_current_task_btf
	FeatureAncestorCgroupID                // bpf_get_current_ancestor_cgroup_id in perf_event programs
	FeatureTaskPtRegs                      // bpf_task_pt_regs: user registers of a sample taken in the kernel
	FeatureLoop                            // bpf_loop: the frame-pointer walk's 1024 steps
	FeatureFindVMA                         // bpf_find_vma: the stack's bounds, for walk checks and copies
	numFeatures
)

// featureInfo describes a Feature for people: its name, the first kernel
// with it, what sprof does with it and, for an optional one, what it does
// instead.
var featureInfo = [numFeatures]struct{ name, since, use, without string }{
	FeatureBTF:        {"kernel BTF", "5.2", "CO-RE relocations and BTF tracepoints", ""},
	FeaturePerfEvent:  {"perf_event programs", "4.9", "the sampling program on cpu-clock", ""},
	FeatureTracingBTF: {"BTF tracepoints (tp_btf)", "5.5", "seeing processes fork and exit", ""},
	FeatureRingBuf:    {"ring buffer", "5.8", "passing samples to sprof", ""},
	FeatureCurrentTaskBTF: {"bpf_get_current_task_btf", "5.11", "bpf_find_vma and bpf_task_pt_regs",
		"as without those"},
	FeatureAncestorCgroupID: {"bpf_get_current_ancestor_cgroup_id", "5.14", "the --cgroup filter",
		"the filter reads the cgroup's parents itself"},
	FeatureTaskPtRegs: {"bpf_task_pt_regs", "5.15", "user stacks of samples that hit the kernel",
		"the user registers are read at the top of the kernel stack"},
	FeatureLoop: {"bpf_loop", "5.17", "frame-pointer walks of up to 1024 frames",
		"the walk runs in up to 33 tail calls of 32 frames"},
	FeatureFindVMA: {"bpf_find_vma", "5.17", "the stack's bounds (frame checks, stack copies)",
		"a thread's stack is taken to span 8 MiB either side of sp, its copies end where it stops being readable, and a copy may carry bytes above it"},
}

// String returns the feature's name: the helper, map or program type.
func (f Feature) String() string {
	if f < 0 || f >= numFeatures {
		return fmt.Sprintf("Feature(%d)", int(f))
	}
	return featureInfo[f].name
}

// Without says what the sampler does instead when the kernel lacks f, an
// Optional feature; "" for the others.
func (f Feature) Without() string { return featureInfo[f].without }

// Since returns the first mainline Linux release with f ("5.17").
func (f Feature) Since() string { return featureInfo[f].since }

// Use says what the sampler does with f, for messages about a missing one.
func (f Feature) Use() string { return featureInfo[f].use }

// AllFeatures returns every feature, in the order `sprof check` lists them.
func AllFeatures() []Feature {
	all := make([]Feature, numFeatures)
	for i := range all {
		all[i] = Feature(i)
	}
	return all
}

// Features is what this kernel offers of each Feature, probed once. Probes
// load tiny programs and create maps, so they need the privileges
// recording does; without them a probe ends in an error that is neither
// nil nor ErrNotSupported, and Has reports false.
type Features struct {
	// Release is the kernel's release, as uname -r prints it.
	Release string
	errs    [numFeatures]error
}

// ProbeFeatures probes every Feature of the running kernel.
//
// Before Linux 5.11 BPF maps and programs count against RLIMIT_MEMLOCK,
// 64 KiB by default before 5.16: too little for the probes and the
// sampler's maps. So it first lifts this process's limit where the kernel
// counts that way (rlimit.RemoveMemlock does nothing on newer kernels);
// without CAP_SYS_RESOURCE that fails, and the probes then fail with
// EPERM, which Check reports.
func ProbeFeatures() *Features {
	_ = rlimit.RemoveMemlock()
	fs := &Features{Release: kernelRelease()}
	for f := range fs.errs {
		fs.errs[f] = probeFeature(Feature(f))
	}
	return fs
}

// Has reports whether the kernel has f and lets this process use it.
func (fs *Features) Has(f Feature) bool { return fs.errs[f] == nil }

// Err returns nil when the kernel has f; an error matching
// ebpf.ErrNotSupported when it does not; any other error when the probe
// could not tell (most often no privileges: errors.Is(err, unix.EPERM)).
func (fs *Features) Err(f Feature) error { return fs.errs[f] }

// Required returns the features without which the sampler cannot run: the
// 5.10 floor. Without the others (Optional) Open picks another path; see
// the package documentation, Kernels.
func Required() []Feature {
	return []Feature{FeatureBTF, FeaturePerfEvent, FeatureTracingBTF, FeatureRingBuf}
}

// Optional reports whether the sampler runs without f.
func (f Feature) Optional() bool { return f >= FeatureCurrentTaskBTF }

// LoopWalk reports whether the sampler's frame-pointer walk runs in one
// bpf_loop and bounds each thread's stack by its mapping (bpf_find_vma,
// bpf_get_current_task_btf: 5.17), the sample program; false when it runs
// in tail calls of 32 frames, sample_compat.
func (fs *Features) LoopWalk() bool {
	return fs.Has(FeatureLoop) && fs.Has(FeatureFindVMA) && fs.Has(FeatureCurrentTaskBTF)
}

// Limits says in one sentence what the sampler does differently on this
// kernel for lack of optional features, for the user to read once at
// start; "" when it lacks none that change what a user sees. Without
// bpf_task_pt_regs or bpf_get_current_ancestor_cgroup_id the fallbacks
// give the same samples.
func (fs *Features) Limits() string {
	if fs.LoopWalk() {
		return ""
	}
	var missing []string
	for _, f := range []Feature{FeatureLoop, FeatureFindVMA, FeatureCurrentTaskBTF} {
		if !fs.Has(f) {
			missing = append(missing, f.String())
		}
	}
	return fmt.Sprintf("kernel %s has no %s (Linux 5.17 has them): thread stacks are bounded by a guess and, for "+
		"stack copies, by what of them is readable rather than by their mapping, so a copy may carry bytes from above a thread's stack",
		fs.Release, strings.Join(missing, " or "))
}

// without returns fs with the features fs lacks plus missing, as a kernel
// without them would be probed: tests run older kernels' paths with it.
func (fs *Features) without(missing ...Feature) *Features {
	out := *fs
	for _, f := range missing {
		out.errs[f] = fmt.Errorf("%s: %w (pretended)", f, ebpf.ErrNotSupported)
	}
	return &out
}

// Check returns nil when the kernel has every Required feature, else an
// error for the first missing one, which names it, the kernel and the fix,
// and wraps ErrNoBTF, ErrUnsupported or ErrPermission.
func (fs *Features) Check() error {
	for _, f := range Required() {
		switch err := fs.errs[f]; {
		case err == nil:
		case f == FeatureBTF:
			return err
		default:
			return featureError(fs.Release, f, err)
		}
	}
	return nil
}

func kernelRelease() string {
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(uts.Release[:])
}

// probeFeature probes one feature; cilium/ebpf's features package caches
// its own probes for the life of the process, and tracingBTF the BTF
// tracepoint's.
func probeFeature(f Feature) error {
	switch f {
	case FeatureBTF:
		return checkBTF(kernelBTFPath)
	case FeaturePerfEvent:
		return features.HaveProgramType(ebpf.PerfEvent)
	case FeatureTracingBTF:
		return tracingBTF.probe()
	case FeatureRingBuf:
		return features.HaveMapType(ebpf.RingBuf)
	}
	helper := map[Feature]asm.BuiltinFunc{
		FeatureCurrentTaskBTF:   asm.FnGetCurrentTaskBtf,
		FeatureAncestorCgroupID: asm.FnGetCurrentAncestorCgroupId,
		FeatureTaskPtRegs:       asm.FnTaskPtRegs,
		FeatureLoop:             asm.FnLoop,
		FeatureFindVMA:          asm.FnFindVma,
	}[f]
	return features.HaveProgramHelper(ebpf.PerfEvent, helper)
}

// tracingBTF is the probe of FeatureTracingBTF, run once per process as
// cilium/ebpf runs its own probes: it looks the tracepoint up in the
// kernel's BTF, which cilium/ebpf parses anew for each program it loads
// (about 5 MB: a second of CPU in the kernel matrix's emulated VMs), and
// a recording asks for the features three times before it samples (the
// command's and Open's CheckHost, Open's ProbeFeatures). Only an answer
// is kept: a probe that could not tell (no privileges) runs again.
var tracingBTF = tracepointProbe{name: "sched_process_fork"}

// tracepointProbe keeps the answer of probeTracepointBTF for the
// tracepoint name: nil, or an error matching ebpf.ErrNotSupported.
type tracepointProbe struct {
	name     string
	mu       sync.Mutex
	answered bool
	err      error
}

func (p *tracepointProbe) probe() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.answered {
		return p.err
	}
	err := probeTracepointBTF(p.name)
	if err == nil || errors.Is(err, ebpf.ErrNotSupported) {
		p.answered, p.err = true, err
	}
	return err
}

// ProbeOffCPU reports whether Config.OffCPU can work here: offcpu.bpf.c
// attaches to the BTF tracepoints sched_switch and, for user stacks,
// sys_exit, and reads a switched-in task's kernel stack with
// bpf_get_task_stack (5.9). Each is probed as the verifier will judge the
// program: a sched_switch program calling the helper on the next task,
// and an empty sys_exit one. Like ProbeFeatures' probes it needs the
// privileges recording does; its error matches ebpf.ErrNotSupported when
// the kernel lacks one of them.
func ProbeOffCPU() error {
	err := probeTracepointBTF("sched_switch",
		asm.LoadMem(asm.R1, asm.R1, 16, asm.DWord), // next, the third argument
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -8),
		asm.Mov.Imm(asm.R3, 8),
		asm.Mov.Imm(asm.R4, 0),
		asm.FnGetTaskStack.Call(),
	)
	if err != nil {
		return fmt.Errorf("BTF tracepoint sched_switch calling bpf_get_task_stack: %w", err)
	}
	if err := probeTracepointBTF("sys_exit"); err != nil {
		return fmt.Errorf("BTF tracepoint sys_exit: %w", err)
	}
	return nil
}

// probeTracepointBTF loads a BTF tracepoint program for the tracepoint
// name that runs body and returns 0, as the sampler attaches to
// sched_process_fork and sched_process_exit (an empty body).
// features.HaveProgramType(ebpf.Tracing) probes fentry instead, which a
// kernel may have without the tracepoint's BTF. A missing tracepoint or a
// helper the kernel does not know fails with EINVAL, ENOENT or E2BIG, or
// is not found in the kernel's BTF.
func probeTracepointBTF(name string, body ...asm.Instruction) error {
	prog, err := ebpf.NewProgramWithOptions(&ebpf.ProgramSpec{
		Type:         ebpf.Tracing,
		AttachType:   ebpf.AttachTraceRawTp,
		AttachTo:     name,
		License:      "GPL",
		Instructions: append(body, asm.LoadImm(asm.R0, 0, asm.DWord), asm.Return()),
	}, ebpf.ProgramOptions{LogDisabled: true})
	if err == nil {
		return prog.Close()
	}
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.E2BIG) || errors.Is(err, unix.ENOENT) || errors.Is(err, btf.ErrNotFound) {
		return fmt.Errorf("%w: %v", ebpf.ErrNotSupported, err)
	}
	return err
}
