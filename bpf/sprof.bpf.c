//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * sprof's sampler: a perf_event program run by a CPU-clock event on every
 * CPU. Each run that passes the filters sends one record through a ring
 * buffer: who was running, its user registers, its kernel stack, its user
 * stack walked by frame pointers and, for processes whose code lacks frame
 * pointers, a copy of the top of the user stack for user space to unwind.
 * Aggregation happens in user space.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "sample.h"
#include "pidmarks.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/*
 * Record layout. Version 3 is the header below followed by kernel_frames
 * kernel addresses and then user_frames user addresses, all u64, native byte
 * order, then, when SAMPLE_PYTHON is set, the Python frames (python.bpf.h),
 * and then, when SAMPLE_STACK_COPY is set, stack_bytes bytes of the user
 * stack from sp upward. Version 2 had no Python frames; version 1 had no
 * stack copy and a zero pad word where stack_bytes is. A later version may
 * append more after these (announced by a flag and a version bump); readers
 * reject versions they do not know.
 */
enum record_version {
	RECORD_VERSION = 3,
};

enum record_limits {
	MAX_KERNEL_FRAMES = 128,
	MAX_USER_FRAMES = 1024,
	MAX_FRAMES = MAX_KERNEL_FRAMES + MAX_USER_FRAMES,
	/* The loader refuses larger stack_copy_size values; perf's limit for
	 * --call-graph dwarf is about the same (65528). */
	MAX_STACK_COPY = 1 << 16,
};

struct sample_header {
	__u16 version;
	__u16 flags; /* enum sample_flag */
	__u16 user_frames;
	__u16 kernel_frames;
	__u32 pid; /* thread group id */
	__u32 tid;
	__u32 cpu;
	__u32 stack_bytes; /* length of the stack copy after the frames */
	__u64 time; /* bpf_ktime_get_ns: CLOCK_MONOTONIC */
	__u64 pc;
	__u64 sp;
	__u64 fp;
	__u64 lr; /* arm64 only */
	char comm[16];
};

/* The record's fixed part. In the scratch buffer it is followed by
 * stack_copy_size bytes, so that a stack copy placed right after the last
 * frame always fits. */
struct sample_buf {
	struct sample_header hdr;
	__u64 frames[MAX_FRAMES];
};

/* Set by the loader before loading; the verifier prunes disabled paths. */
volatile const __u32 self_tgid;
volatile const __u64 cgroup_id;
volatile const bool filter_pids;
volatile const bool follow_forks;
volatile const bool include_idle;
volatile const bool capture_user;
volatile const bool capture_kernel;
/* Bytes of user stack to copy above sp (0: never), and whether to copy for
 * every process rather than only those marked MARK_COPY (pidmarks.h). */
volatile const __u32 stack_copy_size;
volatile const bool copy_all;
/* Kernel features the loader found (see features.go); the verifier prunes
 * the paths of missing ones, so their helpers need not exist. */
volatile const bool have_task_pt_regs;     /* bpf_task_pt_regs, 5.15 */
volatile const bool have_ancestor_cgroup;  /* bpf_get_current_ancestor_cgroup_id in perf_event programs */

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20); /* resized by the loader */
} samples SEC(".maps");

/* Per CPU: samples that found the ring full, and samples sent. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} lost SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} sent SEC(".maps");

/*
 * Where a sample's time goes, for BenchmarkTableWalkPhases: with
 * phase_timing set, each CPU adds the time since the last phase ended to
 * the one that ends (each phase's time includes a clock read), and counts
 * the samples timed, those that reach the ring. Without it the verifier
 * drops each phase() body as dead code; a load of the flag and a jump stay
 * per call (the loaded sample, 4,113 instructions on Linux 6.18, has 51
 * more than without them). The walk is what lies between the registers
 * and finish(), across tail calls too.
 */
enum phase {
	PHASE_START,
	PHASE_FILTER, /* the pid and cgroup filters */
	PHASE_HEADER, /* the scratch record, time, ids and comm; kernel frames */
	PHASE_REGS,   /* the user registers */
	PHASE_WALK,   /* the user stack's walks */
	PHASE_PYTHON, /* the Python frames */
	PHASE_COPY,   /* the stack copy, where one is wanted */
	PHASE_WAKEUP, /* whether to wake the reader */
	PHASE_SEND,   /* the record into the ring, and counted */
	PHASES,
};

volatile const bool phase_timing;

struct phase_times {
	__u64 at;          /* when the last phase ended */
	__u64 ns[PHASES];  /* ns[PHASE_START]: the samples timed */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct phase_times);
} phases SEC(".maps");

static __always_inline void phase(enum phase p)
{
	struct phase_times *t;
	__u32 zero = 0;
	__u64 now;

	if (!phase_timing)
		return;
	t = bpf_map_lookup_elem(&phases, &zero);
	if (!t)
		return;
	now = bpf_ktime_get_ns();
	if (p != PHASE_START)
		t->ns[p] += now - t->at;
	if (p == PHASE_SEND)
		t->ns[PHASE_START]++;
	t->at = now;
}

/* The current task, for CO-RE reads. bpf_get_current_task_btf (5.11) would
 * allow plain loads, but bpf_get_current_task works on every kernel. */
static __always_inline struct task_struct *current_task(void)
{
	return (struct task_struct *)bpf_get_current_task();
}

static __always_inline bool in_cgroup(void)
{
	struct cgroup *cg;

	if (bpf_get_current_cgroup_id() == cgroup_id)
		return true;
	/* A descendant of the cgroup: compare the ancestors from the root
	 * down; an id of 0 means we went past the task's own level. */
	if (have_ancestor_cgroup) {
		for (int level = 0; level < MAX_CGROUP_LEVELS; level++) {
			__u64 id = bpf_get_current_ancestor_cgroup_id(level);
			if (id == cgroup_id)
				return true;
			if (id == 0)
				return false;
		}
		return false;
	}
	/* Without the helper in perf_event programs: up the parents of the
	 * task's cgroup v2 cgroup. */
	cg = BPF_CORE_READ(current_task(), cgroups, dfl_cgrp);
	return cgroup_ancestor(cg, cgroup_id);
}

static __always_inline bool wanted(__u32 tgid)
{
	if (tgid == 0)
		return include_idle;
	if (tgid == self_tgid)
		return false;
	if (filter_pids && !pid_in(tgid))
		return false;
	if (cgroup_id && !in_cgroup())
		return false;
	return true;
}

/* What is known of the stack that held a thread's stack pointer last time:
 * the mapping [start, end) and, below or at end, top, where the stack's
 * readable part ended when a stack copy last looked (see copy_stack): top <
 * end where the kernel merged the stack's mapping with untouched anonymous
 * memory above it. top bounds copies only, not frame records: it is the
 * top of the stack the copy was of, and a thread may run on many stacks in
 * one mapping (Go's goroutines, in its heap), some of them above it. */
struct stack_vma {
	__u64 start;
	__u64 end;
	__u64 top;
};

/* bpf_find_vma costs microseconds in interrupt context (it takes the mmap
 * lock and releases it through irq_work), so each thread's stack mapping
 * is remembered, by thread id. Without bpf_find_vma (before 5.17) the
 * entry holds what copy_stack found of the stack's top instead. A stale
 * entry (the mapping unmapped and replaced while the thread lives, e.g. a
 * coroutine stack pool, or a thread id reused) can only make the bound too
 * tight or too loose; every frame is still read with a checked user read.
 * An LRU hash rather than task storage (5.11): the same on every kernel,
 * and the least recently sampled threads go first when it is full. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32); /* tid */
	__type(value, struct stack_vma);
} stack_vmas SEC(".maps");

static long stack_vma_cb(struct task_struct *task, struct vm_area_struct *vma, void *data)
{
	struct stack_vma *v = data;

	v->start = vma->vm_start;
	v->end = vma->vm_end;
	v->top = vma->vm_end;
	return 0;
}

/* The stack holding sp: records lie in [lo, end); the whole mapping, which
 * a record on another stack must lie outside of, is [lo, mapped_end); a
 * copy of it ends at top (at or below end), where the readable part of the
 * thread's stack ended last time.
 *
 * On the main thread's stack, end is mm->start_stack, the initial stack
 * pointer, above which no frame record lies, read without any lock: sp
 * within MAIN_STACK_SPAN below it is taken to be on the main stack. The
 * mmap area starts at least RLIMIT_STACK plus the stack guard gap below the
 * stack, usually gigabytes; a thread stack mapped closer only gets a looser
 * bound, never a tighter one. Above start_stack, the same mapping holds the
 * argument and environment strings and then the program's path.
 *
 * Elsewhere (pthread stacks, Go goroutine stacks, alternate signal stacks)
 * it is the mapping holding sp, remembered per thread. When that mapping is
 * not known (the kernel has no bpf_find_vma, lookup is false, or the mmap
 * lock is contended), 8 MiB on either side of sp: the default RLIMIT_STACK
 * and pthread stack size. The per-thread memory cut bpf_find_vma calls by
 * 59% under a build load; a program run can make only one such call (its
 * lock is released through a per-CPU irq_work), so only the sample's own sp
 * looks its mapping up. */
#define MAIN_STACK_SPAN (64 << 20)
#define UNKNOWN_STACK_SPAN (8 << 20)

struct stack_bounds {
	__u64 lo, end, mapped_end, top;
	bool guessed; /* the mapping is not known: lo and end are sp -/+ UNKNOWN_STACK_SPAN */
};

static __always_inline struct stack_bounds stack_of(__u64 sp, bool lookup, const bool find_vma)
{
	struct task_struct *task = current_task();
	struct stack_vma found = {}, *known;
	__u64 top = BPF_CORE_READ(task, mm, start_stack);
	__u32 tid = (__u32)bpf_get_current_pid_tgid();

	if (sp < top && top - sp < MAIN_STACK_SPAN) {
		__u64 strings = BPF_CORE_READ(task, mm, env_end);

		return (struct stack_bounds){top - MAIN_STACK_SPAN, top, strings + 2 * 4096, top};
	}
	known = bpf_map_lookup_elem(&stack_vmas, &tid);
	if (known && known->start <= sp && sp < known->top)
		return (struct stack_bounds){known->start, known->end, known->end, known->top};
	if (find_vma && lookup) {
		bpf_find_vma(bpf_get_current_task_btf(), sp, stack_vma_cb, &found, 0);
		if (found.start <= sp && sp < found.end) {
			bpf_map_update_elem(&stack_vmas, &tid, &found, BPF_ANY);
			return (struct stack_bounds){found.start, found.end, found.end, found.end};
		}
	}
	return (struct stack_bounds){sp - UNKNOWN_STACK_SPAN, sp + UNKNOWN_STACK_SPAN, sp + UNKNOWN_STACK_SPAN,
				     sp + UNKNOWN_STACK_SPAN, .guessed = true};
}

/*
 * The leaf's frame record problem. Frame 0 is pc. The frame-pointer register
 * names the leaf's own frame record only once its prologue has run and until
 * its epilogue starts; before and after, and throughout functions compilers
 * leave frameless (GCC does so for leaf functions that need no stack even
 * with -fno-omit-frame-pointer), it still names the caller's record, and
 * walking from it would silently skip the caller. So the leaf's return
 * address is looked for where the ABI leaves it, and used only on evidence:
 *
 *  1. The instruction at pc is a prologue or epilogue instruction:
 *     x86-64: push %rbp (optionally after endbr64) or ret: at (%rsp);
 *             mov %rsp,%rbp: at 8(%rsp), above the pushed %rbp; for push
 *             and mov only if the word there follows a call instruction.
 *     arm64:  paciasp, bti c, stp x29, x30, [sp, ...], mov x29, sp or ret:
 *             in the link register.
 *  2. Otherwise the candidate (x86-64: the word at (%rsp); arm64: lr) is
 *     taken when it is the return address of a direct call (call rel32 or bl,
 *     or a call through a PLT or GOT entry, or to a stub that only jumps on,
 *     as Go's ABI0 wrappers do) whose target, the callee, lies at most
 *     LEAF_MAX_SIZE bytes below pc: the candidate's call is what entered the
 *     function pc is in.
 *  3. arm64 only: lr also lies in that range above the callee. Then lr may
 *     be a frameless leaf's caller placed right above it, or the return
 *     address of a framed function's last call, which returned (pc and lr in
 *     one function, the callee below it). The frame record fp names tells:
 *     its owner (the callee of the call its return address follows) is the
 *     framed function itself in the second case, the caller in the first.
 *     lr at or below pc, or a function entry in (callee, pc], means pc is
 *     not in the callee: no leaf. An owner that is the callee itself means
 *     the leaf is framed and fp names its record, whose return address is
 *     lr: the walk finds the caller there (Go's functions on arm64, whose
 *     callers often lie right above them, were all flagged unsure before
 *     this case was told). An entry in (pc, lr] means pc and lr are
 *     in two functions: lr is the leaf's caller. Otherwise (an owner called
 *     indirectly, or a frameless caller) the caller cannot be told: *unsure
 *     is set and the walk is flagged truncated rather than shown whole
 *     without it. When lr follows an indirect call (blr), an entry in
 *     (pc, lr] is the only evidence taken; without it the caller of a
 *     leaf called that way stays missing, unflagged, since every framed
 *     function whose indirect call returned looks the same.
 *
 * Cases 2 and 3 read code and can in principle be fooled by data that looks
 * like such a return address; they need a direct or PLT call and a leaf
 * smaller than LEAF_MAX_SIZE, otherwise the caller stays missing (never
 * guessed).
 *
 * Code at pc that cannot be read is no reason to stop: a sample taken
 * while the fetch of pc's instruction faults (the first call into a page
 * of code not mapped in yet, as at every program's start and after
 * memory pressure reclaimed it) has pc at a function's entry more often
 * than not, and cases 2 and 3 need the caller's code only.
 */
#define LEAF_MAX_SIZE (8 << 10)
#define MIN_USER_ADDR (64 << 10)
/* Above every user address space (x86-64 with 5-level paging ends at 2^56,
 * arm64 at 2^52): a return address there is garbage such as -1, no frame. */
#define MAX_USER_ADDR (1ULL << 56)

/* arm64 return addresses may carry a pointer authentication code in their
 * top bits; user addresses fit in 48 bits (Linux's default user VA size).
 * The code never changes bit 55, which is set only in the kernel's half of
 * the address space: such a word (garbage such as -1) is no user code, and
 * keeps that bit as bit 56, above MAX_USER_ADDR, which every caller
 * refuses. No branch: one at each of its uses multiplies the paths the
 * verifier walks (on 7.2 arm64 the sampler then passed its million
 * instructions). */
#if defined(__TARGET_ARCH_arm64)
#define code_addr(x) (((x) & 0x0000ffffffffffffULL) | (((x) & (1ULL << 55)) << 1))
#else
#define code_addr(x) (x)
#endif

/* How far below its frame's sp a function's frame record may start. Go on
 * arm64 stores {fp, lr} at sp - 8 and points fp there (its prologue: stp
 * x29, x30, [sp, #-8] after the frame is allocated, then sub x29, sp, #8),
 * so the record of the function a sample or a goroutine's saved context
 * stopped in lies 8 bytes below that sp: the walk's lower bound starting
 * at sp refused it, and every such walk ended truncated there. The records
 * of its callers lie above. C's records start at or above sp, 16-aligned,
 * which sp - 8 never is. */
#if defined(__TARGET_ARCH_arm64)
#define RECORD_BELOW_SP 8
#else
#define RECORD_BELOW_SP 0
#endif

#if defined(__TARGET_ARCH_x86)
static __always_inline __s32 rel32(const __u8 *p)
{
	return (__s32)((__u32)p[0] | (__u32)p[1] << 8 | (__u32)p[2] << 16 | (__u32)p[3] << 24);
}

/* Whether code starts as Go's ABI0 wrapper does: xorps %xmm15,%xmm15. */
#define GO_WRAPPER_START(code) ((code)[0] == 0x45 && (code)[1] == 0x0f && (code)[2] == 0x57 && (code)[3] == 0xff)

/* Where a stub at target whose 20 bytes are code jumps, 0 when it is none:
 * a jmp rel32 alone (a thunk), or Go's ABI0 wrapper, through which the
 * runtime's assembly calls Go functions (rt0_go calls schedinit, morestack
 * newstack): xorps %xmm15,%xmm15, then g into %r14 (mov %fs:-8,%r14, or in
 * PIE builds mov $-8,%r14; mov %fs:(%r14),%r14), then jmp rel32 to the
 * function. A sample in the function before its frame record is written
 * has its return address on top of the stack, after a call to the stub. */
static __always_inline __u64 stub_jump(__u64 target, const __u8 *code)
{
	if (code[0] == 0xe9)
		return target + 5 + rel32(&code[1]);
	if (!GO_WRAPPER_START(code))
		return 0;
	if (code[4] == 0x64 && code[5] == 0x4c && code[6] == 0x8b && code[7] == 0x34 && code[8] == 0x25 &&
	    code[13] == 0xe9)
		return target + 18 + rel32(&code[14]);
	if (code[4] == 0x49 && code[5] == 0xc7 && code[6] == 0xc6 && code[11] == 0x64 && code[12] == 0x4d &&
	    code[13] == 0x8b && code[14] == 0x36 && code[15] == 0xe9)
		return target + 20 + rel32(&code[16]);
	return 0;
}

/* Whether the call that returns to ret entered the function holding pc:
 * its target is at most LEAF_MAX_SIZE below pc. The call is call rel32,
 * maybe to a PLT stub (jmp *GOT(%rip), optionally after endbr64 and bnd)
 * that is followed to the GOT entry, or to a stub that jumps on (see
 * stub_jump), or -fno-plt style call *GOT(%rip).
 * Candidates below mmap_min_addr's default (64 KiB) are small integers, not
 * code addresses; skipping them avoids most faulting reads, each of which
 * costs microseconds. */
static __always_inline bool entered_from(__u64 ret, __u64 pc)
{
	__u8 site[6], stub[20] = {};
	__u64 target, got = 0;

	if (ret < MIN_USER_ADDR || bpf_probe_read_user(site, sizeof(site), (void *)(ret - sizeof(site))))
		return false;
	if (site[0] == 0xff && site[1] == 0x15) { /* call *rel32(%rip) */
		bpf_probe_read_user(&got, sizeof(got), (void *)(ret + rel32(&site[2])));
		return got <= pc && pc - got < LEAF_MAX_SIZE;
	}
	if (site[1] != 0xe8) /* call rel32 */
		return false;
	target = ret + rel32(&site[2]);
	if (target <= pc && pc - target < LEAF_MAX_SIZE)
		return true;
	if (target < MIN_USER_ADDR || bpf_probe_read_user(stub, 11, (void *)target))
		return false;
	/* The rest only for Go's wrapper (stub_jump): a stub near a page's end
	 * is no reason to read the next page. */
	if (GO_WRAPPER_START(stub))
		bpf_probe_read_user(&stub[11], sizeof(stub) - 11, (void *)(target + 11));
	if (stub[0] == 0xff && stub[1] == 0x25) /* jmp *rel32(%rip) */
		bpf_probe_read_user(&got, sizeof(got), (void *)(target + 6 + rel32(&stub[2])));
	else if (stub[0] == 0xf3 && stub[1] == 0x0f && stub[2] == 0x1e && stub[3] == 0xfa) {
		if (stub[4] == 0xf2 && stub[5] == 0xff && stub[6] == 0x25) /* endbr64; bnd jmp */
			bpf_probe_read_user(&got, sizeof(got), (void *)(target + 11 + rel32(&stub[7])));
		else if (stub[4] == 0xff && stub[5] == 0x25) /* endbr64; jmp */
			bpf_probe_read_user(&got, sizeof(got), (void *)(target + 10 + rel32(&stub[6])));
	} else {
		got = stub_jump(target, stub);
	}
	return got <= pc && pc - got < LEAF_MAX_SIZE;
}

/* Whether ret follows a call instruction: call rel32 (5 bytes) or an
 * indirect call, ff /2, of 2 (call *%reg, also after a REX prefix), 3
 * (disp8), 6 (disp32, rip-relative) or 7 (SIB + disp32) bytes. */
static __always_inline bool after_call(__u64 ret)
{
	__u8 b[7]; /* b[7 - k] is the byte at ret - k */

	if (ret < MIN_USER_ADDR || bpf_probe_read_user(b, sizeof(b), (void *)(ret - sizeof(b))))
		return false;
	return b[2] == 0xe8 ||
	       (b[5] == 0xff && (b[6] & 0xf8) == 0xd0) ||
	       (b[4] == 0xff && (b[5] & 0x38) == 0x10) ||
	       (b[1] == 0xff && (b[2] & 0x38) == 0x10) ||
	       (b[0] == 0xff && (b[1] & 0x38) == 0x10);
}

/* leaf_return's x86-64 body; *at is where on the stack the return address
 * lay, for a walk that goes on at the caller: its sp is *at + 8, its
 * %rbp the register's value (no prologue had run, or the epilogue has). */
static __always_inline __u64 leaf_return_at(__u64 pc, __u64 sp, __u64 *at)
{
	__u8 insn[8];
	__u64 ret = 0;
	int slot = -1;
	bool prologue = false;

	bpf_probe_read_user(insn, sizeof(insn), (void *)pc); /* zeros if unreadable: case 2 */
	if (insn[0] == 0xf3 && insn[1] == 0x0f && insn[2] == 0x1e && insn[3] == 0xfa && insn[4] == 0x55)
		slot = 0, prologue = true; /* endbr64; push %rbp */
	else if (insn[0] == 0x55)
		slot = 0, prologue = true; /* push %rbp */
	else if (insn[0] == 0x48 && insn[1] == 0x89 && insn[2] == 0xe5)
		slot = 8, prologue = true; /* mov %rsp,%rbp */
	else if (insn[0] == 0xc3 || (insn[0] == 0xf3 && insn[1] == 0xc3))
		slot = 0; /* ret, rep ret */
	*at = sp + (slot > 0 ? slot : 0);
	if (bpf_probe_read_user(&ret, sizeof(ret), (void *)*at))
		return 0;
	/* Code without frame pointers pushes %rbp as a callee-saved register,
	 * not always first: there the slot need not hold a return address. */
	if (prologue)
		return after_call(ret) ? ret : 0;
	if (slot == 0)
		return ret;
	return entered_from(ret, pc) ? ret : 0;
}

static __always_inline __u64 leaf_return(__u64 pc, __u64 sp, __u64 fp, __u64 lr, bool *unsure)
{
	__u64 at;

	return leaf_return_at(pc, sp, &at);
}
#elif defined(__TARGET_ARCH_arm64)
/* Whether ret follows a call instruction: bl, blr, or the pointer-
 * authenticating blraa, blraaz, blrab, blrabz. */
static __always_inline bool after_call(__u64 ret)
{
	__u32 insn;

	if (ret < MIN_USER_ADDR || bpf_probe_read_user(&insn, sizeof(insn), (void *)(ret - 4)))
		return false;
	return (insn & 0xfc000000) == 0x94000000 ||
	       (insn & 0xfffffc1f) == 0xd63f0000 ||
	       (insn & 0xfefff800) == 0xd63f0800;
}

/*
 * A PLT stub or linker veneer: adrp x16, GOT page; ldr x17, [x16, #slot];
 * add x16, x16, #slot; br x17, with autia1716 before the br where PLT
 * entries authenticate (-z pac-plt); bti c before it all is a prologue
 * instruction to leaf_return. GNU ld emits no unwind table for aarch64's
 * .plt, so this frameless leaf, whose caller is in lr, must be recognised
 * by its code.
 */
#define PLT_ADRP_X16(i) (((i) & 0x9f00001f) == 0x90000010)
#define PLT_LDR_X17(i) (((i) & 0xffc003ff) == 0xf9400211)
#define PLT_ADD_X16(i) (((i) & 0xffc003ff) == 0x91000210)
#define PLT_AUTIA1716 0xd503219f
#define PLT_BR_X17 0xd61f0220

/* The function a PLT stub at stub jumps to, read from its GOT slot; 0 when
 * stub is no PLT stub. */
static __always_inline __u64 plt_target(__u64 stub)
{
	__u32 insn[3];
	__u64 page, got = 0;

	if (stub < MIN_USER_ADDR || bpf_probe_read_user(insn, sizeof(insn), (void *)stub) ||
	    !PLT_ADRP_X16(insn[0]) || !PLT_LDR_X17(insn[1]) || !PLT_ADD_X16(insn[2]))
		return 0;
	/* adrp: immhi (bits 5-23) and immlo (bits 29-30) give a signed
	 * 21-bit page offset from stub's page; ldr: a 12-bit unsigned
	 * offset in 8-byte units. */
	page = (stub & ~0xfffULL) +
	       (__s64)((__s32)((((insn[0] >> 5) & 0x7ffff) << 2 | (insn[0] >> 29 & 3)) << 11) >> 11) * 4096;
	bpf_probe_read_user(&got, sizeof(got), (void *)(page + ((insn[1] >> 10) & 0xfff) * 8));
	return got;
}

/* Whether pc, whose instruction is insn, lies in a PLT stub. */
static __always_inline bool in_plt_stub(__u64 pc, __u32 insn)
{
	__u32 at;

	if (PLT_ADRP_X16(insn))
		at = 0;
	else if (PLT_LDR_X17(insn))
		at = 1;
	else if (PLT_ADD_X16(insn))
		at = 2;
	else if (insn == PLT_AUTIA1716 || insn == PLT_BR_X17)
		at = 3;
	else
		return false;
	if (plt_target(pc - 4 * at))
		return true;
	/* br x17 after autia1716 is the fifth instruction. */
	return insn == PLT_BR_X17 && plt_target(pc - 16);
}

/* The function the direct call before ret entered: the target of the bl
 * at ret - 4, or the function whose PLT stub that is; 0 when ret follows
 * no bl. */
static __always_inline __u64 callee_of(__u64 ret)
{
	__u32 bl;
	__u64 target, fn;

	if (ret < MIN_USER_ADDR || bpf_probe_read_user(&bl, sizeof(bl), (void *)(ret - 4)) ||
	    (bl & 0xfc000000) != 0x94000000)
		return 0;
	target = ret - 4 + (__s64)((__s32)(bl << 6) >> 6) * 4;
	fn = plt_target(target);
	return fn ? fn : target;
}

/* Where the b at fn branches to; fn when fn starts with no b. A callee
 * that does not hold pc may be a stub that only branches on: Go's ABI0
 * wrapper, through which the runtime's assembly calls Go functions, is
 * one b. (Only then: a function that holds pc may itself start with a
 * branch into its own body, as loops compiled by Go and by GCC -Os do.) */
static __always_inline __u64 branch_on(__u64 fn)
{
	__u32 b;

	if (bpf_probe_read_user(&b, sizeof(b), (void *)fn) || (b & 0xfc000000) != 0x14000000)
		return fn;
	return fn + (__s64)((__s32)(b << 6) >> 6) * 4;
}

/* The owner of the frame record at fp: the function whose prologue wrote
 * it, the callee of the call its return address follows; 0 when unknown. */
static __always_inline __u64 record_owner(__u64 fp)
{
	__u64 ret;

	if (fp < MIN_USER_ADDR || (fp & 7) || bpf_probe_read_user(&ret, sizeof(ret), (void *)(fp + 8)))
		return 0;
	return callee_of(code_addr(ret));
}

static __always_inline __u64 leaf_return(__u64 pc, __u64 sp, __u64 fp, __u64 lr, bool *unsure)
{
	__u32 insn;
	__u64 callee, owner;

	bpf_probe_read_user(&insn, sizeof(insn), (void *)pc); /* 0 if unreadable: no case 1 */
	if (insn == 0xd503233f || insn == 0xd503245f ||   /* paciasp, bti c */
	    (insn & 0xffc07fff) == 0xa9807bfd ||          /* stp x29, x30, [sp, #imm]! */
	    (insn & 0xffc07fff) == 0xa9007bfd ||          /* stp x29, x30, [sp, #imm] */
	    insn == 0x910003fd ||                         /* mov x29, sp */
	    insn == 0xd65f03c0 || insn == 0xd65f0bff || insn == 0xd65f0fff) /* ret, retaa, retab */
		return lr < MAX_USER_ADDR ? lr : 0;
	if (in_plt_stub(pc, insn))
		return after_call(lr) ? lr : 0;
	callee = callee_of(lr);
	if (callee && (callee > pc || pc - callee >= LEAF_MAX_SIZE))
		callee = branch_on(callee);
	if (callee) {
		if (callee > pc || pc - callee >= LEAF_MAX_SIZE)
			return 0;
		if (lr < callee || lr - callee >= LEAF_MAX_SIZE)
			return lr;
		/* A leaf's caller placed above it lies above the whole leaf. */
		if (lr <= pc)
			return 0;
	} else if (lr <= pc || !after_call(lr)) {
		return 0;
	}
	owner = record_owner(fp);
	if (owner > pc && owner <= lr)
		return lr;
	if (callee && !(owner >= callee && owner <= pc))
		*unsure = true;
	return 0;
}
#endif

/* Two layouts of the table walk's (see below), shared with tables.go: a
 * rule, and a process's mapping. */
struct unwind_rule {
	__s32 cfa_off;
	__s16 ra_off; /* from the CFA */
	__s16 fp_off; /* from the CFA */
	__u8 kind;    /* enum rule_kind */
	__u8 flags;   /* enum rule_flag */
	__u16 pad;
};

/* A process's executable mapping [start, end): a table's (pc - base is the
 * offset the rows hold) or code with frame pointers. */
struct unwind_mapping {
	__u64 start, end, base;
	__u32 table, kind, gen, pad;
};

/* The bytes of stack the walks read at once (see stack_word): the first
 * read of a sample, and at most, each read twice its predecessor's. */
#define STACK_WINDOW_FIRST 1024
#define STACK_WINDOW 4096

/* The walk's state lives in map memory, not on the stack: the verifier then
 * sees unknown values at every fp_step call, checks the bpf_loop callback
 * once and does not unroll 1024 iterations; and it outlives the tail calls
 * of the walk without bpf_loop. */
struct fp_walk {
	__u64 fp;  /* next frame record */
	__u64 lo;  /* frame records must start at or above lo ... */
	__u64 end; /* ... and end at or below the stack's end */
	/* The mapping of the stack the walk is on: a record on another stack
	 * lies outside [stack_lo, mapped_end). */
	__u64 stack_lo, mapped_end;
	__u32 at;  /* next free slot in rec.frames */
	__u32 n;   /* user frames written */
	__u16 flags;
	__u16 switches; /* stacks switched to (see switch_stack) */
	/* For the stack copy after the walk: the sample's sp, where its
	 * copy ends, and whether that is a guess (see stack_bounds). The
	 * table walk's frame_pointer_rule bounds records by the stack's end
	 * (0 until it first needs it). */
	__u64 sp, stack_top, stack_end;
	bool guessed;
	/* The leaf's caller could not be told (see leaf_return): the record
	 * is flagged truncated once the walk ends, which it must not stop. */
	bool leaf_unsure;
	/* follow_goroutine ran: a walk jumps to the goroutine once. */
	bool goroutine;
	/* The last user frame written: follow_goroutine's, read without a
	 * variable index, which Linux 5.10's verifier cannot always bound;
	 * for the same reason, the walk's first frame (the sampled pc) and
	 * its leaf's return address (0 when not taken; see walk_user). */
	__u64 last, leaf_pc, leaf_ret;
	/* arm64: the sample's g register, R28, and R3, where a Go prologue
	 * keeps its return address while it calls morestack (see
	 * follow_goroutine). */
	__u64 g_reg, r3;
	/* The table walk (table_step): the registers of the frame to unwind
	 * next, whether it is the topmost, why the walk stopped (enum
	 * table_stop, 0 while it goes on), and the mapping last found, which
	 * most frames fall in again. */
	__u64 tpc, tsp, tfp, tlr;
	bool top;
	__u8 tstop;
	struct unwind_mapping map;
	__u32 epoch; /* unwind_epoch at the walk's start */
	/* The walk met a pid user space has not described (find_mapping):
	 * finish wakes the reader, so that it does so soon. */
	bool undescribed;
	/* User space has not named the code object of the sample's
	 * innermost Python frame (py_named, PY_FRESH). */
	bool py_fresh;
	/* The rule last found and the pc it was found for: a recursion
	 * finds the same one frame after frame. */
	__u64 rule_pc;
	struct unwind_rule rule;
	/* The stack window (stack_word): win_len bytes from win_lo; the
	 * next read takes up to win_next. Kept from one sample to the next on
	 * the CPU: the thread sampled last (win_tid), and how far above its
	 * sp the last window ended, less STACK_WINDOW_FIRST (win_extra: the
	 * thread's next sample on the CPU reads that much more at once). */
	__u64 win_lo;
	__u32 win_len, win_next;
	__u32 win_tid, win_extra;
	__u64 win[STACK_WINDOW / 8];
};

/* The table walk's memory of earlier samples on this CPU (see
 * find_mapping and table_rule): most samples of a process repeat the
 * mappings and the return addresses of the ones before, and looking them
 * up again touches a dozen or more cold cache lines each time (an LPM
 * trie's nodes; a page index and a binary search's rows). */
#define MAPPING_SLOTS 8
#define RULE_SLOTS 512 /* a power of two */

struct mapping_slot {
	struct unwind_mapping m;
	__u32 pid, epoch; /* epoch: unwind_epoch when found; 0: empty */
};

struct rule_slot {
	__u64 key; /* (table << 32 | offset) + 1; 0: empty */
	__u32 gen;
	struct unwind_rule rule;
};

struct walk_cache {
	struct mapping_slot maps[MAPPING_SLOTS];
	__u32 next_map; /* the slot the next mapping found replaces */
	struct rule_slot rules[RULE_SLOTS];
};

/* Followed in the map value by stack_copy_size bytes of room for the copy. */
struct scratch_value {
	struct fp_walk walk;
	struct walk_cache cache;
	struct sample_buf rec;
};

/* A record is assembled here and then copied into the ring with its used
 * length only; a ring reservation must have a constant size. One entry per
 * CPU, indexed by CPU number: a per-CPU array would do, but its values are
 * limited to 32 KiB and a 16 KiB stack copy comes on top of 9 KiB of
 * frames. The program cannot run twice at once on one CPU (perf_event
 * programs do not nest). The loader sets max_entries to the number of
 * possible CPUs and adds stack_copy_size to value_size (dropping the BTF
 * value type, which no longer has that size); the verifier reads the frozen
 * stack_copy_size and checks every access against that size. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch_value);
} scratch SEC(".maps");

static __always_inline void put_user_frame(struct scratch_value *s, __u64 addr)
{
	struct fp_walk *w = &s->walk;
	__u32 at = w->at;

	if (at >= MAX_FRAMES || w->n >= MAX_USER_FRAMES) {
		w->flags |= SAMPLE_USER_TRUNCATED;
		return;
	}
	s->rec.frames[at] = addr;
	w->last = addr;
	w->at = at + 1;
	w->n++;
}

/* A frame record outside the stack the walk is on can still be genuine:
 * code that runs on a second stack keeps the frame-pointer chain linked to
 * the first. Go calls the vDSO (time.Now), C code (cgo) and runtime work
 * (systemstack) on the thread's g0 stack, linked back to the goroutine's
 * stack in the heap; signal handlers run on an alternate stack; fibers and
 * coroutines have stacks of their own. Without this, every such sample
 * loses all its callers. A record there is followed only on evidence, at
 * most MAX_STACK_SWITCHES times: it lies in another mapping than the stack
 * the walk is on (a record below sp on the same stack is a stale one of a
 * returned call), and its return address follows a call instruction (a
 * frame-pointer register holding data seldom points at such a word). The
 * walk then goes on within that mapping, strictly increasing again.
 *
 * One record in the same mapping is followed too: Go allocates the g0
 * stacks of the threads it starts and its goroutines' stacks alike from
 * its heap arenas, so runtime.systemstack and runtime.morestack, which
 * run on g0 with the chain linked back to the goroutine, can lead to a
 * record in the same mapping, below. While the walk is still on the
 * sample's own stack and has followed a record there, a record below the
 * sample's sp cannot be one of that stack's live frames; with a return
 * address that follows a call, it is taken to be on the stack the chain
 * came from. (The first record, fp itself, below sp is refused: there the
 * register is stale, not a saved link.)
 *
 * One record is taken without a call before its return address: a
 * goroutine's first (follow_goroutine), whose saved fp is 0 and whose
 * return address is runtime.goexit plus one instruction, a return address
 * Go makes up (no call reaches goexit). A goroutine's chain leads to
 * another stack there while runtime.copystack grows the stack: the chain
 * in the new stack is adjusted before the link to the first frame's
 * record, which still names the old stack, intact until the copy is over;
 * 1-6% of the samples under morestack were seen there. Taking it ends the
 * walk (fp 0), so at most that one frame can be wrong. */
#define MAX_STACK_SWITCHES 3

static __always_inline bool switch_stack(struct fp_walk *w, __u64 fp, __u64 saved_fp, __u64 ret)
{
	struct stack_bounds to;
	bool same_mapping = w->stack_lo <= fp && fp < w->mapped_end;

	if (w->switches >= MAX_STACK_SWITCHES ||
	    (same_mapping && !(w->switches == 0 && w->lo > w->sp && fp < w->sp)) ||
	    !(after_call(ret) || (w->goroutine && saved_fp == 0)))
		return false;
	to = stack_of(fp, false, false);
	if (fp > to.end - 2 * sizeof(__u64))
		return false;
	w->switches++;
	w->end = to.end;
	w->stack_lo = to.lo;
	w->mapped_end = to.mapped_end;
	return true;
}

/* The smallest page size of the kernels sprof supports: a read that ends
 * at a multiple of it stays within the page it starts in. */
#define MIN_PAGE_SIZE 4096

/* The 8-byte word at addr on the stack a walk is on, through a window of
 * it. A walk reads upwards, frame after frame, and one read serves the
 * saved registers of the frames it covers: on a 16-CPU host, a 405-frame
 * walk over tables (256-byte frames, the stack's upper part cold in the
 * caches, each 16-byte read a miss of its own) took 32-37 us with a read
 * per frame, 24-27 with 512-byte windows and 15-19 with 1 KiB
 * (BenchmarkTableWalk, instrumented), so a read there costs about 85 ns
 * and 0.08 ns a byte (fitted to those figures): a read's own cost is the
 * price of a kilobyte. So a walk that needs another window reads twice as
 * much as the last time, up to a page: a stack that deep is likely
 * deeper, and a shallow one still pays a 1 KiB read (on sprof's CI VM,
 * 405 frames took 10-17% less than with 1 KiB windows, interleaved, in its
 * steadier hours). A sample of the thread the CPU sampled last reads at
 * first as far above sp as that sample's windows reached, up to a page
 * (sample_with, finish): a thread's stack keeps its depth from one sample
 * to the next, and its next sample then reads as many bytes in fewer
 * reads (37-frame samples of BenchmarkTableWalkPhases spent 85-158 ns
 * less in their walk, median 101, in four interleaved pairs on sprof's CI
 * VM; 6-frame ones the same). A window ends at the end of the page it
 * starts in, which is mapped since addr is: the page above may not be
 * (the stack's top). The window is the sample's (sample_with forgets it): the same
 * bytes read again later in the same walk are the same. False when the
 * read faults. */
static __always_inline bool stack_word(struct fp_walk *w, __u64 addr, __u64 *v)
{
	__u64 off = addr - w->win_lo, len, next;

	if (addr & 7) /* the window holds aligned words */
		return !bpf_probe_read_user(v, sizeof(*v), (void *)addr);
	if (addr < w->win_lo || off + sizeof(*v) > w->win_len) {
		len = MIN_PAGE_SIZE - (addr & (MIN_PAGE_SIZE - 1));
		/* Bounded before the min: clang would drop a bound after it
		 * (len is at most a page already), and verifiers before 6.12
		 * do not learn one register's bound from its comparison
		 * with another. */
		next = w->win_next;
		if (next > STACK_WINDOW)
			next = STACK_WINDOW;
		if (len > next)
			len = next;
		w->win_len = 0;
		if (bpf_probe_read_user(w->win, len, (void *)addr))
			return false;
		w->win_lo = addr;
		w->win_len = len;
		if (w->win_next < STACK_WINDOW)
			w->win_next *= 2;
		off = 0;
	}
	*v = w->win[(off / sizeof(*v)) & (STACK_WINDOW / sizeof(*v) - 1)];
	return true;
}

/* One frame record of the _thread_stack_pcs-style walk: {saved fp, return
 * address} at fp. A record is used only when it is 8-byte aligned,
 * readable and lies inside [lo, end) or on another stack (switch_stack);
 * the next one must lie entirely above it (strictly increasing, and records
 * do not overlap). The first failing check ends the walk and marks it
 * truncated; a zero saved fp or return address is the outermost frame and
 * ends it cleanly. 8-byte alignment, not 16, because Go's arm64 and amd64
 * frame records are only 8-aligned. */
static __always_inline long fp_step(struct scratch_value *s)
{
	struct fp_walk *w = &s->walk;
	__u64 fp = w->fp;
	__u64 rec[2], ret;

	if (fp == 0)
		return 1;
	if ((fp & 7) || !stack_word(w, fp, &rec[0]) || !stack_word(w, fp + sizeof(rec[0]), &rec[1])) {
		w->flags |= SAMPLE_USER_TRUNCATED;
		return 1;
	}
	ret = code_addr(rec[1]);
	if ((fp < w->lo || fp > w->end - sizeof(rec)) && !switch_stack(w, fp, rec[0], ret)) {
		w->flags |= SAMPLE_USER_TRUNCATED;
		return 1;
	}
	if (rec[1] == 0)
		return 1;
	if (ret < MIN_USER_ADDR || ret >= MAX_USER_ADDR) {
		w->flags |= SAMPLE_USER_TRUNCATED;
		return 1;
	}
	put_user_frame(s, ret);
	w->lo = fp + sizeof(rec);
	w->fp = rec[0];
	return w->flags & SAMPLE_USER_TRUNCATED;
}

/*
 * Where the kernel returns through a thunk, each call of a bpf_loop
 * callback runs up to FP_LOOP_STEPS or TABLE_LOOP_STEPS steps of a walk
 * (batched_steps, set by the loader: bpf/thunks.go), elsewhere one. Linux's
 * x86 mitigations for Retbleed, SRSO and ITS make the BPF JIT emit every
 * return as a jump to a thunk, and a call and its return then cost more
 * than a step's own work. On sprof's CI VM (AMD EPYC, SRSO's safe RET), a
 * frame-pointer walk of 1,004 frames took 14.6-15.1 us at a step a call
 * and 7.2-7.4 at 4 (BenchmarkBPFRun, deep 1000), and the table walk 21.9
 * ns a frame at one step and 13.6 at 4 (BenchmarkTableWalk, 405 frames;
 * at 37 frames, 1.79 us a sample and 1.51). On a 16-CPU Intel host with
 * Enhanced IBRS (no thunk), batches made 37-frame samples slower in each
 * of 3 interleaved rounds (3.68-4.52 us against 2.69-3.31): a batch's
 * steps are copies of the step's code, more for the caches to hold.
 *
 * The verifier checks each step of a batch apart, and Linux 7.2 pays most
 * for a table step. With batches, sample took 386,000 instructions on 7.2
 * for amd64 (79,000 without; on 6.18, 98,000 with and 63,000 without) and
 * 244,000 on 7.2 for arm64 at 2 table steps (123,000 without). 4 took it
 * to 479,000 there, close to the 500,000 that TestEveryPathLoads allows;
 * arm64 has no return thunk to save. MAX_USER_FRAMES is a multiple of
 * each, so that the walks still take up to MAX_USER_FRAMES steps.
 *
 * A batch hides the scratch value's address from clang at each step.
 * Else it computes the addresses of the fields a step uses once, before
 * the batch, and keeps them on the stack: the table walk's callback took
 * 264 bytes of it, against 112 at a step a call, and with sample's 248
 * exceeded the 512 bytes that Linux 6.1 and 6.12 allow a program and the
 * callbacks it calls together; 144 with the barrier. The batches are
 * unrolled: the verifier took a rolled loop for an infinite one.
 */
#define FP_LOOP_STEPS 4
#if defined(__TARGET_ARCH_arm64)
#define TABLE_LOOP_STEPS 2
#else
#define TABLE_LOOP_STEPS 4
#endif
_Static_assert(MAX_USER_FRAMES % FP_LOOP_STEPS == 0 && MAX_USER_FRAMES % TABLE_LOOP_STEPS == 0,
	       "a walk's steps are whole calls");

volatile const bool batched_steps;

/* fp_step as bpf_loop's callback. */
static long fp_loop_step(__u64 i, struct scratch_value **s)
{
	return fp_step(*s);
}

/* FP_LOOP_STEPS of fp_step as bpf_loop's callback (batched_steps). */
static long fp_batch_step(__u64 i, struct scratch_value **s)
{
	struct scratch_value *v = *s;

#pragma clang loop unroll(full)
	for (int j = 0; j < FP_LOOP_STEPS; j++) {
		barrier_var(v); /* the step's addresses stay off the stack: see batched_steps */
		if (fp_step(v))
			return 1;
	}
	return 0;
}

/* The frame-pointer walk through bpf_loop: with batched_steps or not, each
 * way's callback in code the verifier drops on the other. */
static __always_inline void fp_loop(struct scratch_value *s)
{
	if (batched_steps)
		bpf_loop(MAX_USER_FRAMES / FP_LOOP_STEPS, fp_batch_step, &s, 0);
	else
		bpf_loop(MAX_USER_FRAMES, fp_loop_step, &s, 0);
}

/* Frame 0 is pc; then the leaf's return address when the frame-pointer
 * register does not name the leaf's record (see leaf_return); then the
 * frame-pointer chain from fp, one fp_step per record, which the caller
 * runs: walk_user_all or walk_chunk. */
static __always_inline void walk_user(struct scratch_value *s, __u64 pc, __u64 sp, __u64 fp, __u64 lr,
				      struct stack_bounds *stack)
{
	struct fp_walk *w = &s->walk;
	__u64 ret;

	put_user_frame(s, pc);
	w->leaf_unsure = false;
	ret = leaf_return(pc, sp, fp, code_addr(lr), &w->leaf_unsure);
	if (ret) {
		put_user_frame(s, ret);
		w->flags |= SAMPLE_LEAF_RETURN;
	}
	w->leaf_pc = pc;
	w->leaf_ret = ret;
	w->end = stack->end;
	w->lo = sp - RECORD_BELOW_SP;
	w->stack_lo = stack->lo;
	w->mapped_end = stack->mapped_end;
	w->switches = 0;
	w->goroutine = false;
	w->fp = fp;
	w->sp = sp;
	w->stack_top = stack->top;
	w->stack_end = stack->end;
	w->guessed = stack->guessed;
}

/*
 * Without bpf_loop (before 5.17), the walk goes WALK_CHUNK records at a
 * time in a bounded loop, each chunk a tail call of walk_compat (the
 * program itself) until the walk ends. The verifier explores a bounded
 * loop once per iteration and gives up on 8,192 pending branches, which a
 * 1,024-step loop exceeds; a chunk of 32 is checked in milliseconds. The
 * kernel allows 32 tail calls per run (33 since 5.17), so the first chunk,
 * in sample_compat, and 32 more reach MAX_USER_FRAMES. Before 5.10 (and on
 * arm64 before 6.0) a program with tail calls cannot have BPF-to-BPF
 * calls: everything here is inlined.
 */
#define WALK_CHUNK 32

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} walk_tail SEC(".maps");

/* Runs a chunk of the walk; true when the walk has ended. */
static __always_inline bool walk_chunk(struct scratch_value *s)
{
#pragma clang loop unroll(disable)
	for (int i = 0; i < WALK_CHUNK; i++)
		if (fp_step(s))
			return true;
	return false;
}

/* Per Go process (Sampler.SetGo): where runtime.morestack lies, absolute,
 * with runtime.morestack_noctxt, which jumps to it (unwind/goruntime),
 * and how to find the goroutine whose stack it grows: g's offset from the
 * thread pointer (amd64) and the runtime's structure offsets (see
 * unwind/goruntime). Shared with gostack.go. */
struct go_proc {
	__u64 morestack_start, morestack_end;
	__s64 tls_g;
	__u16 g_stack, g_m, g_sched, m_g0, m_gsignal, m_curg;
	__u16 gobuf_sp, gobuf_pc, gobuf_lr, gobuf_bp;
	__u16 pad[2];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32); /* tgid */
	__type(value, struct go_proc);
} go_procs SEC(".maps");

/* The aligned user word at addr, into *v. */
static __always_inline bool read_word(__u64 addr, __u64 *v)
{
	return addr >= MIN_USER_ADDR && addr < MAX_USER_ADDR && !(addr & 7) &&
	       bpf_probe_read_user(v, sizeof(*v), (void *)addr) == 0;
}

/*
 * Go's runtime.morestack, called from a function's prologue when its
 * goroutine's stack is too small, saves the function's context in
 * g.sched, switches to the thread's g0 stack and clears the frame pointer
 * before it calls newstack: the walk of a sample taken while a stack grows
 * ends at morestack's return address, as if that were the outermost frame.
 * There it goes on as Go's own traceback does, at the goroutine: g, the
 * thread's g0 (amd64: in thread-local storage, at tls_g from fsbase; arm64:
 * in R28), m = g0.m, and the goroutine m.curg, each read checked and
 * required to agree (g is m.g0, curg.m is m, as Go's traceback requires;
 * g is m.gsignal instead where a signal handler, on the thread's signal
 * stack, interrupted newstack and the walk came from there to g0);
 * then the frames curg.sched.pc (the function whose prologue called
 * morestack, which must follow a call), its caller's return address (amd64:
 * the word at sched.sp; arm64: sched.lr) and the frame-pointer walk from
 * sched.bp within the goroutine's stack [curg.stack.lo, curg.stack.hi).
 * A sample in morestack itself before g is g0 takes the same two frames
 * from the registers and the stack instead (below). A failed check leaves
 * the walk ended at morestack, which user space marks truncated
 * (collector/gostack.go). Once per walk.
 *
 * From the goroutine's stack the walk may switch stacks once more: while
 * copystack adjusts the frames it copied to the new stack, innermost
 * first, the records not adjusted yet still link to their originals on the
 * old stack, which is intact until copystack frees it, and whose chain goes
 * on to the goroutine's root.
 */
static __always_inline bool in_morestack(struct go_proc *gp, __u64 addr)
{
	return gp->morestack_start <= addr && addr < gp->morestack_end;
}

static __always_inline bool follow_goroutine(struct scratch_value *s)
{
	struct fp_walk *w = &s->walk;
	__u32 tgid = s->rec.hdr.pid, keep = 0;
	__u64 last = w->last, g, m, g0, gsignal, curg, curg_m, stack[2], copied[2], sched, sp, pc, bp, ret;
	struct go_proc *gp;

	/* Only a walk that ended whole: one flagged truncated is marked
	 * already, and the mark's load, and in a Go process the lookup
	 * below, are the price of every other walk. */
	if (w->fp || w->goroutine || (w->flags & SAMPLE_USER_TRUNCATED) || w->n == 0 || !(marks_of(tgid) & MARK_GO))
		return false;
	gp = bpf_map_lookup_elem(&go_procs, &tgid);
	if (!gp)
		return false;
	if (in_morestack(gp, w->leaf_pc))
		keep = 1;
	else if (w->leaf_ret && w->n >= 2 && in_morestack(gp, w->leaf_ret - 1))
		keep = 2;
	else if (!in_morestack(gp, w->n > 1 ? last - 1 : last))
		return false;
	w->goroutine = true;
	/* Sampled in morestack (or morestack_noctxt), or (arm64) in
	 * runtime.save_g, which morestack calls once g is g0 but before sp
	 * and the frame pointer leave the goroutine: the frame-pointer
	 * register still names the record of the caller of the function that
	 * called morestack, so the walk from it skipped that function and its
	 * caller and went on to the root as if whole. It is cut after
	 * morestack and goes on as above, or ends there (user space marks it
	 * truncated). */
	if (keep) {
		w->at = s->rec.hdr.kernel_frames + keep;
		w->n = keep;
		if (keep == 1)
			w->flags &= ~SAMPLE_LEAF_RETURN;
		w->leaf_unsure = false;
	}
#if defined(__TARGET_ARCH_x86)
	if (!read_word(BPF_CORE_READ(current_task(), thread.fsbase) + gp->tls_g, &g))
		return false;
#else
	g = w->g_reg;
#endif
	if (!read_word(g + gp->g_m, &m) || !read_word(m + gp->m_g0, &g0) || !read_word(m + gp->m_curg, &curg))
		return false;
	if (keep == 1 && g != g0) {
		/* Sampled in morestack before it switched to g0 (or in
		 * morestack_noctxt): g is the goroutine, sp on its stack, and
		 * the growing function has no frame yet. Its return address
		 * and its caller's are where the calls left them (amd64: at sp
		 * and sp + 8; arm64: in lr, and in R3, where the prologue moved
		 * lr before it called), the frame pointer is its caller's; both
		 * must follow calls, but for the return address of a
		 * goroutine's first function, runtime.goexit plus one
		 * instruction (see switch_stack), with the frame pointer 0. */
		if (curg != g || !read_word(g + gp->g_stack, &stack[0]) || !read_word(g + gp->g_stack + 8, &stack[1]))
			return false;
		sp = s->rec.hdr.sp;
		bp = s->rec.hdr.fp;
#if defined(__TARGET_ARCH_x86)
		if (!read_word(sp, &pc) || !read_word(sp + 8, &ret))
			return false;
#else
		pc = code_addr(s->rec.hdr.lr);
		ret = w->r3;
#endif
		if (bp && !after_call(code_addr(ret)))
			return false;
	} else {
		if ((g0 != g && (!read_word(m + gp->m_gsignal, &gsignal) || gsignal != g)) ||
		    !read_word(curg + gp->g_m, &curg_m) || curg_m != m || !read_word(curg + gp->g_stack, &stack[0]) ||
		    !read_word(curg + gp->g_stack + 8, &stack[1]))
			return false;
		sched = curg + gp->g_sched;
		if (!read_word(sched + gp->gobuf_sp, &sp) || !read_word(sched + gp->gobuf_pc, &pc) ||
		    !read_word(sched + gp->gobuf_bp, &bp))
			return false;
#if defined(__TARGET_ARCH_x86)
		if (!read_word(sp, &ret))
			return false;
#else
		if (!read_word(sched + gp->gobuf_lr, &ret))
			return false;
#endif
	}
	if (sp < stack[0] || sp >= stack[1] || !after_call(pc))
		return false;
	ret = code_addr(ret);
	if (ret < MIN_USER_ADDR || ret >= MAX_USER_ADDR)
		return false;
	put_user_frame(s, pc);
	put_user_frame(s, ret);
	/* copystack points g.sched.bp into the new stack (adjustctxt) before
	 * g.stack and g.sched.sp, and the records it copied there still link
	 * to the old stack until adjustframe adjusts them: meanwhile bp names
	 * the copy of the caller's record, whose saved frame pointer and
	 * return address are the original's. The walk takes the return
	 * address from there and goes on at the saved record, on the old
	 * stack, intact until copystack frees it. */
	if (bp && (bp < stack[0] || bp >= stack[1])) {
		if (!read_word(bp, &copied[0]) || !read_word(bp + 8, &copied[1]))
			return false;
		ret = code_addr(copied[1]);
		bp = copied[0];
		/* A saved frame pointer 0: the goroutine's first function,
		 * whose return address follows no call (see switch_stack). */
		if (bp && (bp < sp || bp >= stack[1] || !after_call(ret)))
			return false;
		if (ret < MIN_USER_ADDR || ret >= MAX_USER_ADDR)
			return false;
		put_user_frame(s, ret);
	}
	w->flags |= SAMPLE_GOROUTINE;
	w->fp = bp;
	w->lo = sp - RECORD_BELOW_SP;
	w->end = stack[1];
	w->stack_lo = stack[0];
	w->mapped_end = stack[1];
	w->switches = MAX_STACK_SWITCHES - 1;
	return true;
}

/* Runs the frame-pointer walk walk_user set up to its end, on to the
 * goroutine where it ends in morestack (follow_goroutine): with bpf_loop,
 * or a chunk here and the rest in tail calls of walk_compat. */
static __always_inline void walk_rest(struct bpf_perf_event_data *ctx, struct scratch_value *s,
				      const bool walk_helpers)
{
	if (walk_helpers) {
		fp_loop(s);
		if (follow_goroutine(s))
			fp_loop(s);
	} else if (!walk_chunk(s) || follow_goroutine(s)) {
		bpf_tail_call(ctx, &walk_tail, 0);
		s->walk.flags |= SAMPLE_USER_TRUNCATED; /* the tail calls ran out */
	}
}

/* A copy that faults (bpf_probe_read_user fails whole and says nothing of
 * where) is retried up to the first unreadable page above sp, found by a
 * binary search of one-word reads at COPY_GRAIN boundaries: at most
 * PROBE_TRIES of them for the MAX_STACK_COPY / COPY_GRAIN pages a copy can
 * span. COPY_GRAIN, 4 KiB, divides every page size. Each read that faults
 * costs a page-fault exception, microseconds. */
#define COPY_GRAIN 4096ULL
#define PROBE_TRIES 5

static __always_inline bool readable(__u64 addr)
{
	__u64 word;

	return bpf_probe_read_user(&word, sizeof(word), (void *)addr) == 0;
}

/* The first COPY_GRAIN boundary in (sp, sp + n] whose page cannot be read,
 * assuming the readable pages above sp form one run (a page read before a
 * fault is not trusted past it: the copy of the result is checked); sp + n
 * rounded down when there is none. */
static __always_inline __u64 readable_end(__u64 sp, __u64 n)
{
	__u64 base = (sp + COPY_GRAIN) & ~(COPY_GRAIN - 1);
	__u64 lo = 0, hi = (sp + n - base) / COPY_GRAIN; /* pages [base, base + lo * GRAIN) readable; hi unknown */

	if (sp + n < base)
		return sp + n;
	/* Find the least k in [lo, hi] with the page at base + k * GRAIN
	 * unreadable; hi itself may be the end of the copy. */
	for (int i = 0; i < PROBE_TRIES && lo < hi; i++) {
		__u64 mid = (lo + hi) / 2;

		if (readable(base + mid * COPY_GRAIN))
			lo = mid + 1;
		else
			hi = mid;
	}
	return base + lo * COPY_GRAIN;
}

/* Corrects the thread's remembered stack: its copies end at top. Where
 * its mapping is not known, frame records stay bounded by the guess the
 * sample had. */
static __always_inline void remember_top(struct fp_walk *w, __u64 top)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct stack_vma *known = bpf_map_lookup_elem(&stack_vmas, &tid);
	struct stack_vma guessed = {top - UNKNOWN_STACK_SPAN, w->sp + UNKNOWN_STACK_SPAN, top};

	if (known && known->start <= w->sp && w->sp < known->end)
		known->top = top;
	else if (w->guessed)
		bpf_map_update_elem(&stack_vmas, &tid, &guessed, BPF_ANY);
}

static __always_inline void copy_stack(struct scratch_value *s)
{
	struct fp_walk *w = &s->walk;
	__u32 at = w->at;
	__u64 sp = w->sp, end = w->stack_top, want, n, top;
	__u16 cut = 0;
	__u8 *dst;

	w->flags |= SAMPLE_STACK_COPY;
	if (at > MAX_FRAMES) /* never; tells the verifier where dst can be */
		return;
	dst = (__u8 *)&s->rec.frames[at];
	if (end <= sp)
		return;
	want = end - sp;
	if (want > stack_copy_size) {
		want = stack_copy_size;
		cut = SAMPLE_STACK_COPY_TRUNCATED;
	}
	n = want;
	if (n && bpf_probe_read_user(dst, n, (void *)sp)) {
		top = readable_end(sp, n);
		n = top - sp;
		/* The stack's last word; where its end is a guess, the copy's. */
		if (readable((w->guessed ? sp + want : end) - sizeof(__u64))) {
			cut = SAMPLE_STACK_COPY_FAULT | SAMPLE_STACK_COPY_TRUNCATED;
		} else {
			cut = 0;
			remember_top(w, top);
		}
		if (n > stack_copy_size) /* never: n only shrank; for the verifier */
			n = stack_copy_size;
		if (n && bpf_probe_read_user(dst, n, (void *)sp)) {
			n = 0;
			cut = SAMPLE_STACK_COPY_FAULT | SAMPLE_STACK_COPY_TRUNCATED;
		}
	}
	w->flags |= cut;
	s->rec.hdr.stack_bytes = n;
}

static __always_inline bool wants_copy(__u32 tgid)
{
	return stack_copy_size && capture_user && (copy_all || (marks_of(tgid) & MARK_COPY));
}

struct user_regs {
	__u64 pc, sp, fp, lr;
	__u64 g;  /* arm64: R28, which Go code keeps g in */
	__u64 r3; /* arm64: R3 (follow_goroutine) */
};

/* Whether the sample interrupted user mode: its registers are then the
 * user registers, and it has no kernel stack. */
static __always_inline bool interrupted_user(struct bpf_perf_event_data *ctx)
{
#if defined(__TARGET_ARCH_x86)
	return (ctx->regs.cs & 3) == 3;
#elif defined(__TARGET_ARCH_arm64)
	return (ctx->regs.pstate & PSR_MODE_MASK) == PSR_MODE_EL0t;
#endif
}

/* Whether saved registers are those of a 64-bit user process: amd64's
 * user code and stack segments are __USER_CS (0x33) and __USER_DS (0x2b);
 * arm64's pstate says EL0 in AArch64 state; the stack pointer is a user
 * address. */
static __always_inline bool user_mode(struct pt_regs *regs)
{
	__u64 sp = PT_REGS_SP_CORE(regs);

	if (sp < MIN_USER_ADDR || sp >= MAX_USER_ADDR)
		return false;
#if defined(__TARGET_ARCH_x86)
	return BPF_CORE_READ(regs, cs) == 0x33 && BPF_CORE_READ(regs, ss) == 0x2b;
#elif defined(__TARGET_ARCH_arm64)
	return (BPF_CORE_READ(regs, pstate) & PSR_MODE_MASK) == PSR_MODE_EL0t;
#endif
}

/* The largest kernel stack (THREAD_SIZE) user_regs_of tries: 16 KiB is
 * amd64's and arm64's, 32 KiB with KASAN on amd64. */
#define MAX_THREAD_SIZE (64 << 10)
/* The largest gap above the saved user registers at the top of the kernel
 * stack (TOP_OF_KERNEL_STACK_PADDING): 16 bytes on amd64 kernels built for
 * FRED (6.9 and newer), none before. */
#if defined(__TARGET_ARCH_x86)
#define MAX_STACK_PADDING 16
#else
#define MAX_STACK_PADDING 0
#endif

/* The registers user space was interrupted in (or entered the kernel
 * with): the sample's own registers when it interrupted user mode; the
 * pt_regs at the top of the task's kernel stack otherwise, found by
 * bpf_task_pt_regs (5.15) where the kernel has it, else read by CO-RE from
 * task->stack + THREAD_SIZE (less any padding), checked to be user-mode
 * registers since neither is in BTF. False for kernel threads, and when the saved
 * registers cannot be found. */
static __always_inline bool user_regs_of(struct bpf_perf_event_data *ctx, struct task_struct *task,
					 struct user_regs *r)
{
	struct pt_regs *regs = 0;
	__u64 stack, size = bpf_core_type_size(struct pt_regs);

	/* Most samples: user mode, which no kernel thread runs in, so the
	 * task's flags need not be read. */
#if defined(__TARGET_ARCH_x86)
	if (interrupted_user(ctx)) {
		r->pc = ctx->regs.ip;
		r->sp = ctx->regs.sp;
		r->fp = ctx->regs.bp;
		return true;
	}
#elif defined(__TARGET_ARCH_arm64)
	if (interrupted_user(ctx)) {
		r->pc = ctx->regs.pc;
		r->sp = ctx->regs.sp;
		r->fp = ctx->regs.regs[29];
		r->lr = ctx->regs.regs[30];
		r->g = ctx->regs.regs[28];
		r->r3 = ctx->regs.regs[3];
		return true;
	}
#endif
	if (BPF_CORE_READ(task, flags) & PF_KTHREAD)
		return false;
	if (have_task_pt_regs) {
		regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	} else {
		stack = (__u64)BPF_CORE_READ(task, stack);
		for (__u64 thread = 16 << 10; thread <= MAX_THREAD_SIZE && !regs; thread *= 2) {
			for (__u64 pad = 0; pad <= MAX_STACK_PADDING; pad += 16) {
				struct pt_regs *at = (struct pt_regs *)(stack + thread - pad - size);

				if (user_mode(at)) {
					regs = at;
					break;
				}
			}
		}
		if (!regs)
			return false;
	}
	r->pc = PT_REGS_IP_CORE(regs);
	r->sp = PT_REGS_SP_CORE(regs);
	r->fp = PT_REGS_FP_CORE(regs);
#if defined(__TARGET_ARCH_arm64)
	r->lr = PT_REGS_RET_CORE(regs);
	r->g = BPF_CORE_READ((const struct user_pt_regs *)regs, regs[28]);
	r->r3 = BPF_CORE_READ((const struct user_pt_regs *)regs, regs[3]);
#endif
	return true;
}

#include "python.bpf.h"

/* A sample user space must act on soon wakes the reader at once rather
 * than at its next drain, up to 250 ms later:
 * - a table walk that meets a process user space has not described yet:
 *   until the process's mappings reach unwind_maps its samples end at the
 *   first frame without a table, and a compile's first 250 ms is a few
 *   percent of its samples;
 * - the first two samples at least WAKE_SOON_NS apart after a sampled
 *   process execs (exec_wakes, set by wake_on_exec): until user space reads
 *   the new program it marks nothing of it, and a Python script's first
 *   250 ms lacked their Python frames; the second wakeup finds the
 *   libraries the loader mapped since the first (a shared libpython);
 * - a Python sample whose innermost frame runs a code object user space
 *   has not named (py_fresh): user space names it by reading it from the
 *   process, which must still run then. Read at the next drain, the
 *   functions a script ran in its last moments went unnamed ("[unknown]
 *   0x8000..."; every sample of a function that ran a script's last 30 ms,
 *   in 6 of 6 runs).
 * One bound for all three, at most a wakeup per WAKE_SOON_NS on the host:
 * a process user space never describes does not wake it more, nor do a
 * thousand execs a second or a script that keeps defining functions. */
#define WAKE_SOON_NS 10000000ULL
#define EXEC_WAKES 2
__u64 woken_soon;
__u32 exec_wakes;

/* Ends a run: the Python frames of a CPython process, the stack copy, when
 * wanted, and the record into the ring. Each program calls it once, at its
 * end: the verifier checks every inlined copy apart, and the Python walk
 * is most of the instructions it checks. */
static __always_inline int finish(struct scratch_value *s)
{
	struct sample_header *h = &s->rec.hdr;
	__u32 zero = 0;
	__u64 size, wake, *count, reach;

	phase(PHASE_WALK);
	python_frames(s);
	phase(PHASE_PYTHON);
	/* The walk ran, and tables did not find the whole stack. */
	if (s->walk.n && (s->walk.flags & (SAMPLE_USER_TABLES | SAMPLE_USER_TRUNCATED)) != SAMPLE_USER_TABLES &&
	    wants_copy(h->pid))
		copy_stack(s);
	h->user_frames = s->walk.n;
	h->flags = s->walk.flags;
	if (s->walk.n && s->walk.leaf_unsure)
		h->flags |= SAMPLE_USER_TRUNCATED;

	size = sizeof(*h) + (__u64)s->walk.at * sizeof(__u64) + h->stack_bytes;
	phase(PHASE_COPY);
	wake = wakeup(&samples, size);
	if ((s->walk.undescribed || exec_wakes || s->walk.py_fresh) && h->time - woken_soon >= WAKE_SOON_NS) {
		woken_soon = h->time;
		if (exec_wakes)
			exec_wakes--;
		wake = BPF_RB_FORCE_WAKEUP;
	}
	phase(PHASE_WAKEUP);
	if (send_record(&samples, &s->rec, size, sizeof(s->rec) + stack_copy_size, wake))
		count = bpf_map_lookup_elem(&lost, &zero);
	else
		count = bpf_map_lookup_elem(&sent, &zero);
	if (count)
		*count += 1;
	phase(PHASE_SEND);
	/* Last, where its branches add least to what the verifier walks. */
	reach = s->walk.win_lo + s->walk.win_len;
	s->walk.win_tid = h->tid;
	s->walk.win_extra = 0;
	if (s->walk.win_len && reach > h->sp + STACK_WINDOW_FIRST)
		s->walk.win_extra = (reach - h->sp < STACK_WINDOW ? reach - h->sp : STACK_WINDOW) - STACK_WINDOW_FIRST;
	return 0;
}

/*
 * The walk over unwind tables. For code without frame pointers user space
 * loads each binary's unwind rows (from .sframe, else synthesized from
 * .eh_frame) into three arrays, once per binary however many processes map
 * it, and maps each process's address ranges to the tables (tables.go;
 * bpf/doc.go says why this layout). Per frame: the mapping of the pc (the
 * return address - 1 below the topmost frame: the call, not what follows
 * it, which may be another function), the page's slice of the table's rows,
 * a binary search in it for the last row at or below the pc, the row's
 * rule; then the CFA from sp or fp, the return address and the saved fp
 * read from the real stack. Code that keeps frame pointers (Go) takes the
 * frame-pointer rule below the topmost frame. The walk ends at the
 * outermost frame (a row that says the return address is undefined, as
 * _start's and clone's do), and anywhere else it says why; then the frames
 * found stay, marked truncated, or, when not even the topmost frame had a
 * table, the frame-pointer walk and the stack copy run as without tables.
 */
enum table_stop {
	TABLE_GOING,
	TABLE_OUTERMOST,   /* the thread's outermost frame: the stack is whole */
	TABLE_NO_MAPPING,  /* the pc is in no mapping with a table loaded (or in JIT code whose record fails the checks) */
	TABLE_NO_RULE,     /* the table has no row for the pc (and its record fails the checks), or was evicted */
	TABLE_UNSUPPORTED, /* a rule the walk cannot apply (signal frame, register rule below the top) */
	TABLE_FAULT,       /* reading the return address or the saved fp faulted */
	TABLE_BAD_FRAME,   /* the CFA does not increase or is misaligned, or the return address is no code address */
	TABLE_DEPTH,       /* MAX_USER_FRAMES, or the kernel's tail-call limit */
	TABLE_FP_LEAF,     /* the topmost frame keeps frame pointers: the frame-pointer walk's business */
	TABLE_STOPS,
};

enum rule_kind {
	RULE_GAP,        /* no function here */
	RULE_CFA_SP,     /* CFA = sp + cfa_off */
	RULE_CFA_FP,     /* CFA = fp + cfa_off */
	RULE_OUTERMOST,  /* the return address is undefined */
	RULE_UNSUPPORTED,
};

enum rule_flag {
	RULE_RA_SAVED = 1, /* else the return address is still in the link register (arm64, topmost frame) */
	RULE_FP_SAVED = 2, /* else fp is unchanged */
};

enum mapping_kind {
	MAPPING_TABLE,
	MAPPING_FRAME_POINTERS,
	/* Keyed by the pid alone (prefix 32): user space has described the
	 * process, and a pc of its that no longer prefix covers has no
	 * table. */
	MAPPING_PROCESS,
	/* Executable memory of no file: code a JIT compiler wrote (see
	 * frame_pointer_rule). */
	MAPPING_JIT,
};

/* The layouts below are shared with tables.go, as are unwind_rule and
 * unwind_mapping above. */
/* A row: from pc (an offset from its mapping's base) to the next row's, the
 * rule at index rule of unwind_rules. */
struct unwind_row {
	__u32 pc;
	__u32 rule;
};

/* A binary's table: its rows start at row_base in unwind_rows (pc offsets
 * relative to the mapping's base), its page index at page_base in
 * unwind_pages: entry k holds the index of the row covering offset
 * k << TABLE_PAGE_SHIFT, and npages + 1 entries exist. gen changes each
 * time the slot is reused, so a stale mapping finds no rows; used is the
 * last time (bpf_ktime_get_ns, to TABLE_USED_GRAIN) a walk used it, for
 * eviction. */
struct unwind_table {
	__u32 page_base;
	__u32 npages;
	__u32 gen;
	__u32 pad;
	__u64 used;
};

struct unwind_key {
	__u32 prefixlen; /* bits of pid and pc that must match */
	__u32 pid;       /* big-endian, as LPM keys compare bytes */
	__u64 pc;        /* big-endian */
};

#define TABLE_PAGE_SHIFT 12
/* A page holds at most 4,097 candidate rows (a row per byte and the one
 * covering its start): 13 halvings find one. */
#define TABLE_SEARCH_STEPS 13
#define TABLE_USED_GRAIN 1000000000ULL

/* Set by the loader: the walk over tables runs first. */
volatile const bool table_unwind;

/* Sized by the loader from the tables' memory budget. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct unwind_row);
} unwind_rows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} unwind_pages SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct unwind_rule);
} unwind_rules SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct unwind_table);
} unwind_tables SEC(".maps");

/* Not preallocated (an LPM trie never is); perf_event programs may read
 * it, as they may any map but a hash one that is not preallocated. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct unwind_key);
	__type(value, struct unwind_mapping);
} unwind_maps SEC(".maps");

/* Per CPU: the table walks that ended for each enum table_stop. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TABLE_STOPS);
	__type(key, __u32);
	__type(value, __u64);
} table_stops SEC(".maps");

static __always_inline long table_end(struct fp_walk *w, __u8 why)
{
	w->tstop = why;
	return 1;
}

/* Bumped by user space after every change to unwind_maps: a mapping slot
 * found under another epoch may name what is no longer mapped. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} unwind_epoch SEC(".maps");

/* Finds the mapping of pc, remembering it for the frames that follow: the
 * walk's own, else one of the last MAPPING_SLOTS found on this CPU under
 * the same epoch, else the LPM trie's (then remembered in a slot, round
 * robin). */
static __always_inline bool find_mapping(struct scratch_value *s, __u32 pid, __u64 pc)
{
	struct fp_walk *w = &s->walk;
	struct mapping_slot *slot;
	struct unwind_mapping *m;
	struct unwind_key key;
	__u32 i;

	if (w->map.start <= pc && pc < w->map.end)
		return true;
	for (i = 0; i < MAPPING_SLOTS; i++) {
		slot = &s->cache.maps[i];
		if (slot->epoch == w->epoch && slot->pid == pid && slot->m.start <= pc && pc < slot->m.end) {
			w->map = slot->m;
			return true;
		}
	}
	/* Built here, not above: clang builds an initialised key before the
	 * checks, at every frame. */
	key.prefixlen = 96;
	key.pid = __builtin_bswap32(pid);
	key.pc = __builtin_bswap64(pc);
	m = bpf_map_lookup_elem(&unwind_maps, &key);
	if (!m) {
		w->undescribed = true;
		return false;
	}
	if (pc < m->start || pc >= m->end)
		return false;
	w->map = *m;
	if (!w->epoch)
		return true;
	slot = &s->cache.maps[s->cache.next_map++ & (MAPPING_SLOTS - 1)];
	slot->m = *m;
	slot->pid = pid;
	slot->epoch = w->epoch;
	return true;
}

/* The rule for the pc at offset off of table t, or 0. */
static __always_inline struct unwind_rule *find_rule(struct unwind_table *t, __u64 off)
{
	struct unwind_row *row;
	__u32 at, lo, hi, *page;

	if (off >= (__u64)t->npages << TABLE_PAGE_SHIFT)
		return 0;
	at = t->page_base + (__u32)(off >> TABLE_PAGE_SHIFT);
	page = bpf_map_lookup_elem(&unwind_pages, &at);
	if (!page)
		return 0;
	lo = *page;
	at++;
	page = bpf_map_lookup_elem(&unwind_pages, &at);
	if (!page)
		return 0;
	hi = *page;
	/* The last row in [lo, hi] at or below off. */
	for (int i = 0; i < TABLE_SEARCH_STEPS && lo < hi; i++) {
		__u32 mid = lo + (hi - lo + 1) / 2;

		row = bpf_map_lookup_elem(&unwind_rows, &mid);
		if (!row)
			return 0;
		if (row->pc <= off)
			lo = mid;
		else
			hi = mid - 1;
	}
	row = bpf_map_lookup_elem(&unwind_rows, &lo);
	if (!row || lo < hi || row->pc > off)
		return 0;
	at = row->rule;
	return bpf_map_lookup_elem(&unwind_rules, &at);
}

/* The rule for the pc at offset off of table t (w->map.table), into the
 * walk's rule fields: from the rule slot of (table, generation, offset),
 * else found in the table and kept in that slot, a gap where the table
 * has none (code without CFI, which frame_pointer_rule may walk, is met
 * again and again). False for an offset past 32 bits. */
static __always_inline bool table_rule(struct scratch_value *s, struct unwind_table *t, __u64 off)
{
	struct fp_walk *w = &s->walk;
	__u64 key = ((__u64)w->map.table << 32 | (__u32)off) + 1;
	struct rule_slot *slot = &s->cache.rules[(key * 0x9e3779b97f4a7c15ULL) >> 55 & (RULE_SLOTS - 1)];
	struct unwind_rule *rule;

	if (off >> 32) /* rows hold 32-bit offsets */
		return false;
	if (slot->key != key || slot->gen != w->map.gen) {
		rule = find_rule(t, off);
		slot->key = key;
		slot->gen = w->map.gen;
		if (rule)
			slot->rule = *rule;
		else
			slot->rule.kind = RULE_GAP;
	}
	w->rule = slot->rule;
	return true;
}

/*
 * Code with no rule: JIT compilers' output (MAPPING_JIT), and code of a
 * file that its CFI does not describe, such as V8's builtins, embedded in
 * node's text. Both are seen between frames that have rules: a Node.js or
 * Java stack is the interpreter's or JIT's frames between the runtime's C++
 * and libc's start code. JIT compilers keep frame records, always (V8) or
 * on request (HotSpot's -XX:+PreserveFramePointer), right below the CFA
 * (x86-64: push %rbp; mov %rsp,%rbp; arm64: stp x29, x30, [sp, #-16]!;
 * mov x29, sp), and so does such hand-written code as a rule; so there the
 * walk takes the frame-pointer rule, CFA = fp + 16, rather than end, the
 * CFA being the caller's sp, which a caller with a rule may need. Before,
 * the table walk ended at such a frame and the frame-pointer walk took
 * over, which ends at the first caller without frame pointers (libc's
 * start code: all of a Node.js program's samples were marked truncated)
 * and pays for a stack copy.
 *
 * The record must lie on the sample's stack, above the frame's sp, as the
 * frame-pointer walk demands, and a return address of 0 there is no
 * outermost frame. In code of a file (in_file), where the frame pointer
 * may as well be a callee-saved register holding data, the return address
 * must follow a call, and below the topmost frame the pc too: a signal
 * handler's return address is the signal trampoline's first instruction
 * (glibc's __restore_rt, whose CFI the tables drop, a gap), and the frame
 * pointer there is the interrupted code's, whose own frame the rule would
 * skip. JIT code is taken on the record alone, as the frame-pointer walk
 * takes it: the forms of its calls are the runtime's own (HotSpot's
 * compiled frames failed the x86-64 call check), and code without records
 * (HotSpot without -XX:+PreserveFramePointer) may be misread there as
 * before by the frame-pointer walk. A function whose CFI the
 * tables drop for another reason (GCC's stack-realigning DRAP prologue)
 * keeps a record whose CFA is not fp + 16: its caller may be misread
 * there, as before it ended the walk. In the topmost frame the frame pointer
 * may still name the caller's record (a prologue, a frameless leaf):
 * leaf_return's evidence decides, as for the frame-pointer walk. On x86-64
 * the rule then reads the return address where that found it; on arm64 it
 * is in lr, and the caller's sp is not known (a leaf may have moved sp
 * without a record), so such a frame gives way to the frame-pointer walk,
 * as a leaf with frame pointers does. Sets the walk's rule; false when the
 * frame fails the checks.
 */
static __always_inline bool frame_pointer_rule(struct scratch_value *s, bool in_file, bool top)
{
	struct fp_walk *w = &s->walk;
	__u64 fp = w->tfp, ra;

	w->rule_pc = 0; /* not the rule of the pc */
	w->rule.ra_off = -8;
	if (top) {
#if defined(__TARGET_ARCH_x86)
		__u64 at;

		if (leaf_return_at(w->tpc, w->tsp, &at)) {
			w->flags |= SAMPLE_LEAF_RETURN;
			w->rule.kind = RULE_CFA_SP;
			w->rule.cfa_off = at + sizeof(at) - w->tsp;
			w->rule.flags = RULE_RA_SAVED;
			return true;
		}
#else
		bool unsure = false;

		if (leaf_return(w->tpc, w->tsp, fp, code_addr(w->tlr), &unsure) || unsure)
			return false;
		/* fp again, from memory: leaf_return's paths leave it with
		 * different bounds, which the checks below would make the
		 * verifier tell apart, walking the rest of the step once for
		 * each (Linux 7.2 on arm64 then checked 300,000 more
		 * instructions). */
		barrier();
		fp = w->tfp;
#endif
	}
	if (!w->stack_end)
		w->stack_end = stack_of(s->rec.hdr.sp, true, false).end;
	if ((fp & 7) || fp < w->tsp || fp > w->stack_end - 2 * sizeof(fp))
		return false;
	if (!stack_word(w, fp + sizeof(fp), &ra) || !code_addr(ra))
		return false;
	if (in_file && ((!top && !after_call(code_addr(w->tpc))) || !after_call(code_addr(ra))))
		return false;
	w->rule.kind = RULE_CFA_FP;
	w->rule.cfa_off = 16;
	w->rule.fp_off = -16;
	w->rule.flags = RULE_RA_SAVED | RULE_FP_SAVED;
	return true;
}

/* One frame of the table walk: the caller's registers from the frame's,
 * and its return address into the record; nonzero when the walk ends.
 * fp_elsewhere: code without a rule takes the frame-pointer rule
 * (frame_pointer_rule), on bpf_loop's path only, which the verifier checks
 * once, not for each step of a chunk. below_top: the frame is not the
 * topmost, which batched steps unwind before their loop (see
 * table_batch_step). */
static __always_inline long table_step(struct scratch_value *s, const bool fp_elsewhere, const bool below_top)
{
	struct fp_walk *w = &s->walk;
	bool top = !below_top && w->top;
	__u64 look = top ? w->tpc : w->tpc - 1;
	__u64 now = s->rec.hdr.time, fp = w->tfp, cfa, ra;
	struct unwind_table *t;
	__u32 at;

	if (!find_mapping(s, s->rec.hdr.pid, look))
		return table_end(w, TABLE_NO_MAPPING);
	/* Without fp_elsewhere a JIT mapping finds no table (MapJIT). */
	if (fp_elsewhere && w->map.kind == MAPPING_JIT) {
		if (!frame_pointer_rule(s, false, top))
			return table_end(w, TABLE_NO_MAPPING);
	} else if (w->map.kind == MAPPING_FRAME_POINTERS) {
		/* In the topmost frame fp may still name the caller's record
		 * (a prologue, a frameless leaf): leaf_return's business. */
		if (top)
			return table_end(w, TABLE_FP_LEAF);
		w->rule_pc = 0;
		w->rule.kind = RULE_CFA_FP;
		w->rule.cfa_off = 16;
		w->rule.ra_off = -8;
		w->rule.fp_off = -16;
		w->rule.flags = RULE_RA_SAVED | RULE_FP_SAVED;
	} else if (look != w->rule_pc) {
		at = w->map.table;
		t = bpf_map_lookup_elem(&unwind_tables, &at);
		if (!t || t->gen != w->map.gen)
			return table_end(w, TABLE_NO_RULE);
		if (t->used + TABLE_USED_GRAIN < now)
			t->used = now;
		if (!table_rule(s, t, look - w->map.base))
			return table_end(w, TABLE_NO_RULE);
		w->rule_pc = look;
	}
	if (fp_elsewhere && w->rule.kind == RULE_GAP && !frame_pointer_rule(s, true, top))
		return table_end(w, TABLE_NO_RULE);
	switch (w->rule.kind) {
	case RULE_CFA_SP:
		cfa = w->tsp + w->rule.cfa_off;
		break;
	case RULE_CFA_FP:
		cfa = fp + w->rule.cfa_off;
		break;
	case RULE_OUTERMOST:
		return table_end(w, TABLE_OUTERMOST);
	case RULE_GAP:
		return table_end(w, TABLE_NO_RULE);
	default:
		return table_end(w, TABLE_UNSUPPORTED);
	}
	/* The CFA is the caller's sp: above this frame's, except at an
	 * arm64 function's entry (CFA = sp, the return address in lr). */
	if ((cfa & 7) || cfa < w->tsp || (cfa == w->tsp && !top))
		return table_end(w, TABLE_BAD_FRAME);
	/* fp first: where both are saved it lies below the return address
	 * (amd64's push rbp, arm64's frame record), so one window serves
	 * both. */
	if ((w->rule.flags & RULE_FP_SAVED) && !stack_word(w, cfa + w->rule.fp_off, &fp))
		return table_end(w, TABLE_FAULT);
	if (w->rule.flags & RULE_RA_SAVED) {
		if (!stack_word(w, cfa + w->rule.ra_off, &ra))
			return table_end(w, TABLE_FAULT);
	} else if (top) {
		ra = w->tlr;
	} else {
		return table_end(w, TABLE_UNSUPPORTED);
	}
	ra = code_addr(ra); /* arm64: a PAC-signed return address loses its code */
	if (ra == 0)
		return table_end(w, TABLE_OUTERMOST);
	if (ra < MIN_USER_ADDR || ra >= MAX_USER_ADDR)
		return table_end(w, TABLE_BAD_FRAME);
	if (w->n >= MAX_USER_FRAMES)
		return table_end(w, TABLE_DEPTH);
	put_user_frame(s, ra);
	w->tpc = ra;
	w->tsp = cfa;
	w->tfp = fp;
	w->top = false;
	return 0;
}

/* table_step as bpf_loop's callback, the topmost frame's too. */
static long table_loop_step(__u64 i, struct scratch_value **s)
{
	return table_step(*s, true, false);
}

/* TABLE_LOOP_STEPS of table_step as bpf_loop's callback (batched_steps),
 * below the topmost frame: that frame's step, with the leaf's cases
 * (frame_pointer_rule's leaf_return, the return address in lr), runs
 * before the loop, so that the verifier checks those once, not in each
 * step of a batch (on Linux 7.2 for arm64, with a frame-pointer step a
 * call, four table steps took sample to 529,000 instructions with them
 * and 403,000 without). One step a call takes the topmost frame in the
 * callback, as before batches: a sample then runs one copy of the step's
 * code, not two, and the caches hold less (see batched_steps). */
static long table_batch_step(__u64 i, struct scratch_value **s)
{
	struct scratch_value *v = *s;

#pragma clang loop unroll(full)
	for (int j = 0; j < TABLE_LOOP_STEPS; j++) {
		barrier_var(v); /* the step's addresses stay off the stack: see batched_steps */
		if (table_step(v, true, true))
			return 1;
	}
	return 0;
}

/* Runs a chunk of the table walk; true when the walk has ended. */
static __always_inline bool table_chunk(struct scratch_value *s)
{
#pragma clang loop unroll(disable)
	for (int i = 0; i < WALK_CHUNK; i++)
		if (table_step(s, false, false))
			return true;
	return false;
}

/* The table walk's next chunk, for sample_compat's walk as walk_tail is for
 * the frame-pointer walk. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} table_tail SEC(".maps");

static __always_inline void table_start(struct scratch_value *s, struct user_regs *r)
{
	struct fp_walk *w = &s->walk;
	__u32 zero = 0, *epoch;

	put_user_frame(s, r->pc);
	w->leaf_unsure = false;
	w->goroutine = false;
	w->leaf_pc = r->pc;
	w->leaf_ret = 0;
	w->tpc = r->pc;
	w->tsp = r->sp;
	w->tfp = r->fp;
	w->tlr = r->lr;
	w->top = true;
	w->tstop = TABLE_GOING;
	w->map.start = 0;
	w->map.end = 0;
	w->rule_pc = 0;
	w->stack_end = 0; /* frame_pointer_rule finds it when it needs it */
	w->undescribed = false;
	epoch = bpf_map_lookup_elem(&unwind_epoch, &zero);
	w->epoch = epoch ? *epoch : 0;
}

/* After the table walk: a whole stack goes as it is; a partial one keeps
 * its frames, marked truncated, and gets the stack copy where the process
 * has one; a walk that found no table for the topmost frame gives way to
 * the frame-pointer walk (and the copy), as without tables, and so does
 * one that ended in morestack, on to the goroutine. True when the
 * frame-pointer walk is to run (walk_rest): its one call in each program
 * is checked once by the verifier, not once per way there. after_chunk:
 * called by table_compat, which runs after a whole chunk of frames, so the
 * walk never gives way there; told so, the verifier does not check the
 * frame-pointer walk's start (walk_user) for each way the chunk may end
 * (on 7.2 for arm64 that took table_compat from ~190,000 instructions to
 * ~996,000). */
static __always_inline bool after_tables(struct scratch_value *s, const bool walk_helpers, const bool after_chunk)
{
	struct sample_header *h = &s->rec.hdr;
	struct fp_walk *w = &s->walk;
	struct stack_bounds stack;
	__u32 why = w->tstop ? w->tstop : TABLE_DEPTH;
	__u64 *count = bpf_map_lookup_elem(&table_stops, &why);

	if (count)
		*count += 1;
	if (why == TABLE_OUTERMOST) {
		w->flags |= SAMPLE_USER_TABLES;
		return false;
	}
	stack = stack_of(h->sp, true, walk_helpers);
	w->sp = h->sp;
	w->stack_top = stack.top;
	w->stack_end = stack.end;
	w->guessed = stack.guessed;
	/* A Go stack that grows: the walk went past morestack's return
	 * address, where the frame pointer is 0, and on to the goroutine. */
	w->fp = w->tfp;
	if (w->n > 1 && follow_goroutine(s)) {
		w->flags |= SAMPLE_USER_TABLES;
		return true;
	}
	if (w->n > 1 || after_chunk) {
		w->flags |= SAMPLE_USER_TABLES | SAMPLE_USER_TRUNCATED;
		return false;
	}
	w->at = h->kernel_frames;
	w->n = 0;
	w->flags = 0;
	walk_user(s, h->pc, h->sp, h->fp, h->lr, &stack);
	return true;
}

/*
 * Whether the sampled task is in execve. From the point where the new
 * program's memory replaces the old one's (exec_mmap) until execve
 * returns, the user registers are still the old program's and its stack
 * is gone: a walk would read the new program's memory at the old
 * addresses, and user space, which describes the process as the new
 * program by then, would name the old pc in the new program's mappings
 * (`compile` samples in the kernel's ELF loader showed Go's
 * internal/strconv.formatBits as their user frame, the go command's
 * syscall address in the compiler). The task does not tell that point
 * apart from execve's first microseconds, which still run under the old
 * memory: such a sample has no user stack at all, marked truncated. A
 * kernel without the flag loads the program and reads the registers.
 */
static __always_inline bool in_execve(struct task_struct *task)
{
	return bpf_core_field_exists(task->in_execve) && BPF_CORE_READ_BITFIELD_PROBED(task, in_execve);
}

/* The sampled thread's user registers into the record's header, and its
 * user stack's walk. */
static __always_inline void sample_user(struct bpf_perf_event_data *ctx, struct scratch_value *s,
					const bool walk_helpers)
{
	struct sample_header *h = &s->rec.hdr;
	struct user_regs regs = {};
	struct stack_bounds stack;

	user_regs_of(ctx, current_task(), &regs);
	phase(PHASE_REGS);
	h->pc = regs.pc;
	h->sp = regs.sp;
	h->fp = regs.fp;
	h->lr = regs.lr;
	s->walk.g_reg = regs.g;
	s->walk.r3 = regs.r3;
	if (!capture_user || !regs.pc)
		return;
	if (table_unwind) {
		table_start(s, &regs);
		if (walk_helpers) {
			if (!batched_steps)
				bpf_loop(MAX_USER_FRAMES, table_loop_step, &s, 0);
			else if (!table_step(s, true, false))
				bpf_loop(MAX_USER_FRAMES / TABLE_LOOP_STEPS, table_batch_step, &s, 0);
		} else if (!table_chunk(s)) {
			bpf_tail_call(ctx, &table_tail, 0);
		}
		if (!after_tables(s, walk_helpers, false))
			return;
	} else {
		stack = stack_of(regs.sp, true, walk_helpers);
		walk_user(s, regs.pc, regs.sp, regs.fp, regs.lr, &stack);
	}
	walk_rest(ctx, s, walk_helpers);
}

/* The body of both sampling programs; walk_helpers picks bpf_loop and
 * bpf_find_vma (5.17), which older kernels' verifiers reject even in code
 * they prove dead, over tail calls of walk_compat. */
static __always_inline int sample_with(struct bpf_perf_event_data *ctx, const bool walk_helpers)
{
	__u64 id = bpf_get_current_pid_tgid(), other;
	__u32 tgid = id >> 32, cpu;
	struct scratch_value *s;
	struct sample_header *h;
	long n;

	phase(PHASE_START);
	if (!wanted(tgid))
		return 0;
	phase(PHASE_FILTER);
	cpu = bpf_get_smp_processor_id();
	s = bpf_map_lookup_elem(&scratch, &cpu);
	if (!s)
		return 0;
	h = &s->rec.hdr;
	s->walk.at = 0;
	s->walk.n = 0;
	s->walk.flags = 0;
	s->walk.win_len = 0;
	/* STACK_WINDOW_FIRST, plus win_extra for the thread sampled last:
	 * without a branch, which took the verifier through ~20,000 more
	 * instructions of the batched sample on Linux 6.18. */
	other = s->walk.win_tid ^ (__u32)id; /* 0 for the same thread */
	s->walk.win_next = STACK_WINDOW_FIRST + (s->walk.win_extra & (((other | -other) >> 63) - 1));

	h->version = RECORD_VERSION;
	h->pid = tgid;
	h->tid = (__u32)id;
	h->cpu = cpu;
	h->stack_bytes = 0;
	h->time = bpf_ktime_get_ns();
	/* Two loads from the task where its BTF pointer exists (5.11, and
	 * bpf_loop's path has it): 7 ns against the helper's 60 on sprof's CI
	 * VM (BenchmarkFloor in a scratch build). Unlike the helper's, the
	 * copy keeps what may follow the NUL, which user space clears. */
	if (walk_helpers)
		__builtin_memcpy(h->comm, bpf_get_current_task_btf()->comm, sizeof(h->comm));
	else
		bpf_get_current_comm(h->comm, sizeof(h->comm));

	/* perf takes kernel frames from kernel-mode registers only: in user
	 * mode the helper would find none, and costs 0.3-0.9 us. */
	if (capture_kernel && !interrupted_user(ctx)) {
		n = bpf_get_stack(ctx, s->rec.frames, MAX_KERNEL_FRAMES * sizeof(__u64), 0);
		if (n > 0)
			s->walk.at = n / sizeof(__u64);
	}
	h->kernel_frames = s->walk.at;
	phase(PHASE_HEADER);

	if (capture_user && !interrupted_user(ctx) && in_execve(current_task())) {
		h->pc = h->sp = h->fp = h->lr = 0;
		s->walk.flags = SAMPLE_USER_TRUNCATED;
	} else {
		sample_user(ctx, s, walk_helpers);
	}
	return finish(s);
}

/* The sampler on Linux 5.17 and newer. */
SEC("perf_event")
int sample(struct bpf_perf_event_data *ctx)
{
	return sample_with(ctx, true);
}

/* The sampler on Linux 5.10 to 5.16: the walk in chunks, and stack bounds
 * without bpf_find_vma. */
SEC("perf_event")
int sample_compat(struct bpf_perf_event_data *ctx)
{
	return sample_with(ctx, false);
}

/* The walk's next chunk, tail-called by sample_compat and by itself (the
 * loader puts it in walk_tail) until the walk ends or the kernel's tail
 * call limit ends it at MAX_USER_FRAMES or more, flagged truncated as at
 * the depth limit. */
SEC("perf_event")
int walk_compat(struct bpf_perf_event_data *ctx)
{
	__u32 cpu = bpf_get_smp_processor_id();
	struct scratch_value *s = bpf_map_lookup_elem(&scratch, &cpu);

	if (!s)
		return 0;
	walk_rest(ctx, s, false);
	return finish(s);
}

/* The table walk's next chunk, tail-called by sample_compat and by itself
 * (the loader puts it in table_tail) until the walk ends; then the run
 * ends as sample_compat's would (after_tables). */
SEC("perf_event")
int table_compat(struct bpf_perf_event_data *ctx)
{
	__u32 cpu = bpf_get_smp_processor_id();
	struct scratch_value *s = bpf_map_lookup_elem(&scratch, &cpu);

	if (!s)
		return 0;
	if (!table_chunk(s))
		bpf_tail_call(ctx, &table_tail, 0);
	if (after_tables(s, false, true))
		walk_rest(ctx, s, false);
	return finish(s);
}

/* With Config.FollowForks, a process forked by a followed process is
 * followed too. A process forked by one marked for stack copies is marked:
 * it has its parent's mappings until it execs (then user space decides
 * again), and its first samples must not wait for user space to hear of
 * it. Threads share their parent's tgid and need nothing. */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(follow_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = parent->tgid;
	__u32 ctgid = child->tgid;

	if (ptgid == ctgid)
		return 0;
	if (follow_forks && pid_in(ptgid))
		pid_put(ctgid, 1);
	if (stack_copy_size && !copy_all && (marks_of(ptgid) & MARK_COPY))
		marks_put(ctgid, MARK_COPY);
	return 0;
}

/* With a pid filter or stack copies for marked processes: a process leaves
 * the filter and loses its marks when its last thread exits, so a reused
 * pid is not sampled or copied for it. do_exit decrements
 * signal->live before this tracepoint fires; threads exiting together may
 * each see it at 0, and each take the process out again. */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(forget_exit, struct task_struct *task)
{
	__u32 tgid = task->tgid;

	if (task->signal->live.counter == 0) {
		if (filter_pids)
			pid_put(tgid, 0);
		marks_put(tgid, 0);
	}
	return 0;
}

/* A sampled process ran a new program: the next samples wake the reader
 * (see exec_wakes). In the exec'ing task, which is current. */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(wake_on_exec, struct task_struct *p)
{
	if (wanted(p->tgid))
		exec_wakes = EXEC_WAKES;
	return 0;
}
