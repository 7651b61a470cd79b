//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * sprof's off-CPU program: where threads wait. On the scheduler's context
 * switch (the sched_switch BTF tracepoint), a thread of the selected
 * processes that leaves the CPU (prev, the current task) has the time noted
 * in a per-thread table; when it is about to run again (next) after
 * off_cpu_min_ns or more, its kernel stack is read from the sleeping task
 * (bpf_get_task_stack): as it has not run since, that is the stack it left
 * the CPU with. Its user stack can only be read in its own context, and
 * walking it at every switch-out would cost microseconds per switch, most
 * of them for waits too short to report. A thread that waited in a system
 * call runs no user code until the call returns, so the record is finished
 * there, on the sys_exit BTF tracepoint, with the user stack walked then:
 * the one of the switch-out, paid for only by reported waits. A thread
 * that left the CPU outside a system call (preempted, or blocked in a page
 * fault) gets its record at once, with its user registers and no user
 * stack beyond pc (marked truncated).
 *
 * Only helpers and program types of Linux 5.10 are used: no bpf_loop,
 * task storage, bpf_task_pt_regs or kprobes (which not every kernel has).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* UAPI values vmlinux.h leaves out (include/uapi/linux/bpf.h). */
#define OFFCPU_MAP_TYPE_LRU_HASH 9
#define OFFCPU_F_USER_STACK (1ULL << 8)

/*
 * Record layout. An off-CPU record shares the ring with the sampler's
 * records and is told apart by its first u16, which no sampler record
 * version takes: the header below, then kernel_frames kernel addresses and
 * user_frames user addresses (u64, native byte order), then, when
 * OFFCPU_STACK_COPY is set, stack_bytes bytes of the user stack from sp
 * upward, as in the sampler's records.
 */
enum offcpu_record_version {
	OFFCPU_RECORD_VERSION = 0x4f01, /* 'O', 1 */
};

/* The flags mean what the sampler's flags of the same bit mean. */
enum offcpu_flag {
	/* The user stack filled the buffer (kernel.perf_event_max_stack or
	 * OFFCPU_USER_FRAMES): frames may be missing at the root. */
	OFFCPU_USER_TRUNCATED = 1 << 0,
	/* The record ends with a copy of the user stack (stack_bytes). */
	OFFCPU_STACK_COPY = 1 << 2,
	/* The stack may go on above the copy. */
	OFFCPU_STACK_COPY_TRUNCATED = 1 << 3,
	/* Reading the stack faulted: the copy is a shorter prefix. */
	OFFCPU_STACK_COPY_FAULT = 1 << 4,
};

enum offcpu_limits {
	OFFCPU_KERNEL_FRAMES = 128,
	OFFCPU_USER_FRAMES = 128,
	OFFCPU_FRAMES = OFFCPU_KERNEL_FRAMES + OFFCPU_USER_FRAMES,
	OFFCPU_MAX_STACK_COPY = 1 << 16,
};

#define MAX_CGROUP_LEVELS 32

struct offcpu_header {
	__u16 version;
	__u16 flags; /* enum offcpu_flag */
	__u16 user_frames;
	__u16 kernel_frames;
	__u32 pid; /* thread group id */
	__u32 tid;
	__u32 cpu; /* the CPU it ran on again */
	__u32 stack_bytes; /* length of the stack copy after the frames */
	__u64 time;   /* switch-in, bpf_ktime_get_ns: CLOCK_MONOTONIC */
	__u64 off_ns; /* time off the CPU */
	__u64 pc;
	__u64 sp;
	__u64 fp;
	__u64 lr; /* arm64 only */
	char comm[16];
};

struct offcpu_buf {
	struct offcpu_header hdr;
	__u64 frames[OFFCPU_FRAMES];
};

/* Set by the loader before loading. */
volatile const __u32 self_tgid;
volatile const __u64 cgroup_id;
volatile const bool filter_pids;
volatile const bool capture_user;
volatile const bool capture_kernel;
volatile const __u64 off_cpu_min_ns;
/* Bytes of user stack to copy above sp (0: never), and whether for every
 * process rather than those in copy_pids, as the sampler's. */
volatile const __u32 stack_copy_size;
volatile const bool copy_all;

/* Replaced by the sampler's maps of the same names at load time
 * (CollectionOptions.MapReplacements): one ring, one filter. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} samples SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u8);
} pids SEC(".maps");

/* A thread off the CPU, or back from it with its record waiting for the
 * end of its system call. */
struct off_thread {
	__u64 since;   /* bpf_ktime_get_ns at the switch-out; 0: on a CPU */
	__u64 pending; /* ns off the CPU awaiting sys_exit; 0: none */
	__u64 back;    /* when it ran again, for the record's time */
	__u32 cpu;     /* where it ran again */
	__u16 kernel_frames;
	bool in_syscall; /* it left the CPU inside a system call */
	__u8 pad;
	__u64 kernel[OFFCPU_KERNEL_FRAMES];
};

/* Processes whose records carry a stack copy: the sampler's map. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u8);
} copy_pids SEC(".maps");

/* Threads off the CPU or pending, by tid. An LRU map: a thread that exits
 * while off the CPU leaves an entry that ages out; so, on a host with more
 * threads asleep than entries, does the longest sleeper's. Entries are
 * reused in place. Sized by the loader. */
struct {
	__uint(type, OFFCPU_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct off_thread);
} off_threads SEC(".maps");

/* A zeroed entry to insert a thread's first entry from (the BPF stack is
 * too small for one). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct off_thread);
} off_blank SEC(".maps");

/* Per-CPU counters, indexed by enum offcpu_counter. */
enum offcpu_counter {
	COUNT_SENT,     /* records put in the ring */
	COUNT_LOST,     /* records that found the ring full */
	COUNT_UNTRACKED, /* switch-outs off_threads had no room for */
	COUNT_SHORT,    /* switch-ins below off_cpu_min_ns */
	COUNTERS,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} offcpu_counts SEC(".maps");

/* The record is assembled here, then copied into the ring with its used
 * length. One entry per possible CPU (the loader sets max_entries and
 * adds stack_copy_size to the value size, as for the sampler's scratch).
 * Tracing programs do not nest on a CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct offcpu_buf);
} offcpu_scratch SEC(".maps");

/* Kernel types beyond vmlinux.h's, as local CO-RE flavours (the ___offcpu
 * suffix is dropped when matching the kernel's BTF). */
struct kernfs_node___offcpu {
	__u64 id;
} __attribute__((preserve_access_index));

struct cgroup_subsys_state___offcpu {
	struct cgroup_subsys_state___offcpu *parent;
} __attribute__((preserve_access_index));

struct cgroup___offcpu {
	struct cgroup_subsys_state___offcpu self;
	struct kernfs_node___offcpu *kn;
} __attribute__((preserve_access_index));

struct css_set___offcpu {
	struct cgroup___offcpu *dfl_cgrp;
} __attribute__((preserve_access_index));

/* Whether the registers were saved on entry to a system call. */
#if defined(__TARGET_ARCH_x86)
struct pt_regs___offcpu {
	unsigned long orig_ax; /* the call's number; -1 for interrupts */
} __attribute__((preserve_access_index));
#define in_syscall(regs) ((long)BPF_CORE_READ((struct pt_regs___offcpu *)(regs), orig_ax) >= 0)
#else
struct pt_regs___offcpu {
	int syscallno; /* NO_SYSCALL (-1) outside system calls */
} __attribute__((preserve_access_index));
#define in_syscall(regs) (BPF_CORE_READ((struct pt_regs___offcpu *)(regs), syscallno) >= 0)
#endif

struct task_struct___offcpu {
	void *stack;
	char comm[16];
	struct css_set___offcpu *cgroups;
} __attribute__((preserve_access_index));

static __always_inline void count(__u32 which)
{
	__u64 *n = bpf_map_lookup_elem(&offcpu_counts, &which);

	if (n)
		*n += 1;
}

/* Whether task's cgroup v2 is cgroup_id or below it: the parent chain is
 * walked by CO-RE reads, as bpf_get_current_ancestor_cgroup_id is not
 * offered to tracing programs before Linux 6.x. */
static __always_inline bool in_cgroup(struct task_struct___offcpu *task)
{
	struct cgroup___offcpu *cg = BPF_CORE_READ(task, cgroups, dfl_cgrp);

	for (int level = 0; level < MAX_CGROUP_LEVELS && cg; level++) {
		if (BPF_CORE_READ(cg, kn, id) == cgroup_id)
			return true;
		/* self is a cgroup's first member: its css parent is the
		 * parent cgroup's self. */
		cg = (struct cgroup___offcpu *)BPF_CORE_READ(cg, self.parent);
	}
	return false;
}

static __always_inline bool wanted(struct task_struct *task)
{
	__u32 tgid = task->tgid;

	if (tgid == 0 || tgid == self_tgid || (task->flags & PF_KTHREAD))
		return false;
	if (filter_pids && !bpf_map_lookup_elem(&pids, &tgid))
		return false;
	if (cgroup_id && !in_cgroup((struct task_struct___offcpu *)task))
		return false;
	return true;
}

/* Where the user registers lie (task_pt_regs), as an offset from
 * task->stack: THREAD_SIZE less sizeof(struct pt_regs) less a padding
 * that depends on the architecture and kernel configuration (x86-64 with
 * FRED leaves 16 bytes). Learnt from the first sys_exit, whose argument is
 * that pointer; 0 until then. */
__u64 regs_at;

static __always_inline struct pt_regs *regs_of(struct task_struct *task)
{
	__u64 at = regs_at;

	if (!at)
		return 0;
	return (struct pt_regs *)((__u64)BPF_CORE_READ((struct task_struct___offcpu *)task, stack) + at);
}

/* prev, the current task, leaves the CPU: note when. */
static __always_inline void note_out(struct task_struct *prev, __u64 now)
{
	__u32 tid = prev->pid, zero = 0;
	struct off_thread *t, *blank;
	struct pt_regs *regs;

	if (!wanted(prev))
		return;
	t = bpf_map_lookup_elem(&off_threads, &tid);
	if (!t) {
		blank = bpf_map_lookup_elem(&off_blank, &zero);
		if (!blank || bpf_map_update_elem(&off_threads, &tid, blank, BPF_NOEXIST) ||
		    !(t = bpf_map_lookup_elem(&off_threads, &tid))) {
			count(COUNT_UNTRACKED);
			return;
		}
	}
	if (t->pending && !t->since) {
		/* Off the CPU again before its system call returned: the
		 * same wait goes on (a futex woken but taken by another
		 * thread), added to the pending record at the switch-in. */
		t->since = now;
		return;
	}
	regs = regs_of(prev);
	t->in_syscall = !regs || in_syscall(regs);
	t->since = now;
}

/* Threads with a record pending (off_thread.pending set): while there are
 * none, sys_exit, which runs for every system call on the host, costs one
 * load. A thread that dies pending leaves it one too high, which costs
 * only lookups. Changed with relaxed __atomic_fetch_add, whose result is
 * unused: clang then emits BPF_XADD, where __sync_fetch_and_add gives an
 * atomic fetch-add that Linux 5.10 rejects ("BPF_STX uses reserved
 * fields"). */
__u64 pending_threads;

/* Same policy as the sampler's (see wakeup in sprof.bpf.c), with its own
 * state: at worst the reader is woken once by each program. */
__u64 woken_at[2];

static __always_inline __u64 wakeup(__u64 size)
{
	__u64 ring = bpf_ringbuf_query(&samples, BPF_RB_RING_SIZE);
	__u64 avail = bpf_ringbuf_query(&samples, BPF_RB_AVAIL_DATA) + size;
	__u64 at = bpf_ringbuf_query(&samples, BPF_RB_CONS_POS) + 1;
	int level;

	if (avail >= ring / 2)
		level = 1;
	else if (avail >= ring / 4)
		level = 0;
	else
		return BPF_RB_NO_WAKEUP;
	if (woken_at[level] == at)
		return BPF_RB_NO_WAKEUP;
	woken_at[level] = at;
	return BPF_RB_FORCE_WAKEUP;
}

/* Fills the record's header and kernel frames from t and task; the caller
 * adds user frames from frame index h->kernel_frames on and sends it. */
static __always_inline struct offcpu_buf *start_record(struct off_thread *t, struct task_struct *task, __u64 off)
{
	__u32 cpu = bpf_get_smp_processor_id(), nk = t->kernel_frames;
	struct offcpu_buf *b = bpf_map_lookup_elem(&offcpu_scratch, &cpu);
	struct offcpu_header *h;

	if (!b)
		return 0;
	h = &b->hdr;
	h->version = OFFCPU_RECORD_VERSION;
	h->flags = 0;
	h->pid = BPF_CORE_READ(task, tgid);
	h->tid = BPF_CORE_READ(task, pid);
	h->cpu = t->cpu;
	h->stack_bytes = 0;
	h->time = t->back;
	h->off_ns = off;
	h->pc = h->sp = h->fp = h->lr = 0;
	h->user_frames = 0;
	BPF_CORE_READ_INTO(&h->comm, (struct task_struct___offcpu *)task, comm);
	if (nk > OFFCPU_KERNEL_FRAMES)
		nk = OFFCPU_KERNEL_FRAMES;
	h->kernel_frames = nk;
	bpf_probe_read_kernel(b->frames, nk * sizeof(__u64), t->kernel);
	return b;
}

static __always_inline void user_regs(struct offcpu_header *h, struct pt_regs *regs)
{
	h->pc = PT_REGS_IP_CORE(regs);
	h->sp = PT_REGS_SP_CORE(regs);
	h->fp = PT_REGS_FP_CORE(regs);
#if defined(__TARGET_ARCH_arm64)
	h->lr = PT_REGS_RET_CORE(regs);
#endif
}

static __always_inline void send(struct offcpu_buf *b)
{
	struct offcpu_header *h = &b->hdr;
	__u64 size = sizeof(*h) + ((__u64)h->kernel_frames + h->user_frames) * sizeof(__u64) + h->stack_bytes;

	if (size > sizeof(*b) + stack_copy_size)
		size = sizeof(*b) + stack_copy_size;
	if (bpf_ringbuf_output(&samples, b, size, wakeup(size)))
		count(COUNT_LOST);
	else
		count(COUNT_SENT);
}

/* next is about to run again. A wait long enough gets its kernel stack,
 * still the one it slept in, and then its record: here when it left the
 * CPU outside a system call, at sys_exit otherwise. */
static __always_inline void note_in(struct task_struct *next, __u64 now)
{
	__u32 tid = next->pid;
	struct off_thread *t;
	struct offcpu_buf *b;
	struct pt_regs *regs;
	__u64 off;
	long n;

	t = bpf_map_lookup_elem(&off_threads, &tid);
	if (!t || !t->since)
		return;
	off = now - t->since;
	t->since = 0;
	if (t->pending) {
		t->pending += off;
		return;
	}
	if (off < off_cpu_min_ns) {
		count(COUNT_SHORT);
		return;
	}
	t->back = now;
	t->cpu = bpf_get_smp_processor_id();
	t->kernel_frames = 0;
	if (capture_kernel) {
		n = bpf_get_task_stack(next, t->kernel, sizeof(t->kernel), 0);
		if (n > 0)
			t->kernel_frames = n / sizeof(__u64);
	}
	if (t->in_syscall && capture_user) {
		t->pending = off;
		__atomic_fetch_add(&pending_threads, 1, __ATOMIC_RELAXED);
		return;
	}
	b = start_record(t, next, off);
	if (!b)
		return;
	regs = regs_of(next);
	if (capture_user && regs) {
		__u32 at = b->hdr.kernel_frames;

		user_regs(&b->hdr, regs);
		if (b->hdr.pc && at < OFFCPU_FRAMES) {
			b->frames[at] = b->hdr.pc;
			b->hdr.user_frames = 1;
			b->hdr.flags |= OFFCPU_USER_TRUNCATED;
		}
	}
	send(b);
}

/* Only the first three arguments, which every kernel since 5.5 passes
 * (5.18 appended prev_state). */
SEC("tp_btf/sched_switch")
int BPF_PROG(switch_task, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	__u64 now = bpf_ktime_get_ns();

	note_out(prev, now);
	note_in(next, now);
	return 0;
}

/* A system call returns: finish the record of a wait inside it with the
 * user stack, which is still the one the thread left the CPU with. */
/* Copies up to stack_copy_size bytes of the user stack from sp upward
 * after the frames at index at, for user space to unwind code without
 * frame pointers. Where the stack ends is not known here (bpf_find_vma
 * is 5.17), so a read that faults is retried shorter, cut at 4 KiB
 * boundaries below its middle, at most COPY_TRIES times in all. */
#define COPY_TRIES 4

static __always_inline void copy_stack(struct offcpu_buf *b, __u32 at)
{
	struct offcpu_header *h = &b->hdr;
	__u64 sp = h->sp, n = stack_copy_size, mid;
	__u8 *dst;
	int i;

	h->flags |= OFFCPU_STACK_COPY | OFFCPU_STACK_COPY_TRUNCATED;
	if (at > OFFCPU_FRAMES || !sp)
		return;
	dst = (__u8 *)&b->frames[at];
	for (i = 0; i < COPY_TRIES; i++) {
		if (n > stack_copy_size) /* for the verifier */
			n = stack_copy_size;
		if (n == 0 || !bpf_probe_read_user(dst, n, (void *)sp))
			break;
		h->flags |= OFFCPU_STACK_COPY_FAULT;
		mid = (sp + n / 2) & ~4095ULL;
		n = mid > sp ? mid - sp : 0;
	}
	if (i < COPY_TRIES)
		h->stack_bytes = n;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(syscall_done, struct pt_regs *regs, long ret)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct task_struct *task;
	struct off_thread *t;
	struct offcpu_buf *b;
	__u32 at;
	long n;

	if (!regs_at) {
		__u64 addr = 0, stack;

		/* As a number: the verifier allows no arithmetic on regs. */
		bpf_probe_read_kernel(&addr, sizeof(addr), &ctx[0]);
		task = (struct task_struct *)bpf_get_current_task();
		stack = (__u64)BPF_CORE_READ((struct task_struct___offcpu *)task, stack);
		if (addr > stack && addr - stack < (1 << 16))
			regs_at = addr - stack;
	}
	if (!pending_threads)
		return 0;
	t = bpf_map_lookup_elem(&off_threads, &tid);
	if (!t || !t->pending)
		return 0;
	task = (struct task_struct *)bpf_get_current_task();
	b = start_record(t, task, t->pending);
	t->pending = 0;
	__atomic_fetch_add(&pending_threads, -1, __ATOMIC_RELAXED);
	if (!b)
		return 0;
	user_regs(&b->hdr, regs);
	at = b->hdr.kernel_frames;
	if (at <= OFFCPU_KERNEL_FRAMES) {
		n = bpf_get_stack(ctx, &b->frames[at], OFFCPU_USER_FRAMES * sizeof(__u64), OFFCPU_F_USER_STACK);
		if (n > 0) {
			b->hdr.user_frames = n / sizeof(__u64);
			if (b->hdr.user_frames == OFFCPU_USER_FRAMES)
				b->hdr.flags |= OFFCPU_USER_TRUNCATED;
		}
	}
	if (stack_copy_size) {
		__u32 tgid = b->hdr.pid;

		if (copy_all || bpf_map_lookup_elem(&copy_pids, &tgid))
			copy_stack(b, at + b->hdr.user_frames);
	}
	send(b);
	return 0;
}
