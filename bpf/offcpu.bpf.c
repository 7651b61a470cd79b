//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * sprof's off-CPU program: where threads wait. On the scheduler's context
 * switch (the sched_switch BTF tracepoint), a thread of the selected
 * processes that leaves the CPU (prev, the current task) has the time noted
 * in a table of switch-out times; when it is about to run again (next)
 * after off_cpu_min_ns or more, its kernel stack is read from the sleeping
 * task (bpf_get_task_stack): as it has not run since, that is the stack it
 * left the CPU with.
 *
 * The switch itself is the hot path: a host may switch 100,000 times a
 * second, nearly all of them for waits far below the minimum. So a switch
 * costs two probes of one cache line of the table (switch_out, switch_in)
 * and, when either thread is followed, the time schedule() has just read
 * into the runqueue (switch_time); no helper calls, no clock read and no
 * other memory. All the rest is paid for by waits that reach the minimum.
 *
 * A thread's user stack can only be read in its own context. A thread that
 * waited in a system call runs no user code until the call returns, so its
 * record is finished there, on the sys_exit BTF tracepoint, with the user
 * stack walked then: the one of the switch-out. That hook makes every
 * system call on the host take the kernel's slower traced path, so user
 * space detaches it while system calls are too many for its CPU budget
 * (exit_gen 0); records of waits in system calls then carry the user pc
 * alone, marked truncated, and are counted (COUNT_CUT). A thread that left
 * the CPU outside a system call (preempted, or blocked in a page fault)
 * gets its record at once, with its user registers and no user stack
 * beyond pc (marked truncated).
 *
 * Only helpers and program types of Linux 5.10 are used: no bpf_loop,
 * task storage, bpf_task_pt_regs or kprobes (which not every kernel has).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "sample.h"
#include "pidmarks.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* UAPI values vmlinux.h leaves out (include/uapi/linux/bpf.h). */
#define OFFCPU_MAP_TYPE_LRU_HASH 9
#define OFFCPU_F_USER_STACK (1ULL << 8)

/*
 * Record layout. An off-CPU record shares the ring with the sampler's
 * records and is told apart by its first u16, which no sampler record
 * version takes: the header below, then kernel_frames kernel addresses and
 * user_frames user addresses (u64, native byte order), then, when
 * SAMPLE_STACK_COPY is set, stack_bytes bytes of the user stack from sp
 * upward, as in the sampler's records. The flags are the sampler's
 * (enum sample_flag).
 */
enum offcpu_record_version {
	OFFCPU_RECORD_VERSION = 0x4f01, /* 'O', 1 */
};

enum offcpu_limits {
	OFFCPU_KERNEL_FRAMES = 128,
	OFFCPU_USER_FRAMES = 128,
	OFFCPU_FRAMES = OFFCPU_KERNEL_FRAMES + OFFCPU_USER_FRAMES,
};

struct offcpu_header {
	__u16 version;
	__u16 flags; /* enum sample_flag */
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
 * process rather than those marked MARK_COPY, as the sampler's. */
volatile const __u32 stack_copy_size;
volatile const bool copy_all;
/* Whether to count the switch-ins below off_cpu_min_ns (COUNT_SHORT): a
 * counter on the path of nearly every switch, kept for --stats. */
volatile const bool count_short;

/* Replaced by the sampler's maps of the same names at load time
 * (CollectionOptions.MapReplacements), as are the pid filter (pidset.h)
 * and the marks (pidmarks.h): one ring, one filter, one set of marks. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} samples SEC(".maps");

/*
 * Switch-out times, by tid: SLOT_SETS sets of SLOT_WAYS slots, a thread's
 * set chosen by the low bits of its tid, so that a switch reads one cache
 * line whatever the number of threads. A slot is a u64: the time (ns >>
 * SLOT_TIME_SHIFT), the slot's state and the tid's high bits (its tag).
 * Threads of one set beyond its ways evict the one off the CPU longest,
 * whose wait is then lost and counted (COUNT_DROPPED): with 2^15 sets, a
 * host needs several thousand threads off the CPU at once before that is
 * more than rare. A thread that exits is never switched in again, so it
 * takes no slot on its way out (PF_EXITING).
 */
enum offcpu_slot {
	SLOT_SET_BITS = 15,
	SLOT_SETS = 1 << SLOT_SET_BITS,
	SLOT_WAYS = 4,
	/* pid_max is at most 2^22 (PID_MAX_LIMIT on 64-bit). */
	SLOT_TAG_BITS = 22 - SLOT_SET_BITS,
	/* enum offcpu_slot_state and the SLOT_YIELDED bit. */
	SLOT_STATE_BITS = 3,
	/* 2^(64-10) units of 32 ns: 18 years of uptime. */
	SLOT_TIME_SHIFT = 5,
};

#define SLOT_TAG_MASK ((1ULL << SLOT_TAG_BITS) - 1)
#define SLOT_STATE_MASK 3ULL
#define SLOT_LOW_BITS (SLOT_TAG_BITS + SLOT_STATE_BITS)

enum offcpu_slot_state {
	SLOT_FREE = 0, /* the whole slot is 0 */
	/* Off the CPU since the slot's time. */
	SLOT_OFF = 1,
	/* Back on the CPU since the slot's time, its record waiting for the
	 * end of its system call (the pending map holds it). */
	SLOT_PENDING_ON = 2,
	/* Off the CPU again since the slot's time before that system call
	 * returned: the same wait goes on (a futex woken but taken by
	 * another thread), and is added to the pending record. */
	SLOT_PENDING_OFF = 3,
	/* With SLOT_OFF: the thread left the CPU runnable, not preempted,
	 * which is the kernel's schedule() on its way back to user space
	 * (arm64 only; see yielded). */
	SLOT_YIELDED = 4,
};

struct slot_set {
	__u64 way[SLOT_WAYS];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SLOT_SETS);
	__type(key, __u32);
	__type(value, struct slot_set);
} switch_outs SEC(".maps");

/* A wait whose record is finished at sys_exit: what the switch-in knew. */
struct pending {
	__u64 off_ns; /* time off the CPU */
	__u64 back;   /* when it ran again, for the record's time */
	__u64 gen;    /* exit_gen when it was noted */
	__u32 cpu;    /* where it ran again */
	__u16 kernel_frames;
	__u16 pad;
	__u64 kernel[OFFCPU_KERNEL_FRAMES];
};

/* Pending records by tid: only waits of OffCPUMin or more in system calls,
 * for the microseconds until the call returns. An LRU map: the entry of a
 * thread that dies pending ages out. */
struct {
	__uint(type, OFFCPU_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct pending);
} pendings SEC(".maps");

/* A zeroed entry to insert a thread's first entry from (the BPF stack is
 * too small for one). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct pending);
} pending_blank SEC(".maps");

/* Per-CPU counters, indexed by enum offcpu_counter. */
enum offcpu_counter {
	COUNT_SENT,    /* records put in the ring */
	COUNT_LOST,    /* records that found the ring full */
	COUNT_DROPPED, /* waits noted but never sent: their slot taken by
			* another thread (switch_outs), pending when the
			* sys_exit hook went off, or their sys_exit preempted
			* another's record on the CPU */
	COUNT_SHORT,   /* switch-ins below off_cpu_min_ns, if count_short */
	COUNT_CUT,     /* waits in system calls sent without their user stack
			* while the sys_exit hook was off (exit_gen 0) */
	COUNT_EXITS,   /* system call exits seen, for user space's budget */
	COUNTERS,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} offcpu_counts SEC(".maps");

/* A record is assembled in a scratch buffer, then copied into the ring
 * with its used length. One entry per possible CPU (the loader sets
 * max_entries and adds stack_copy_size to the value size, as for the
 * sampler's scratch). switch_task runs with preemption off and does not
 * nest, so offcpu_scratch is its own; syscall_done has exit_scratch,
 * because on a preemptible kernel (PREEMPT or PREEMPT_LAZY, where the
 * system call tracepoints may fault) it runs with only migration off and
 * can be preempted mid-record, which runs switch_task on the same CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct offcpu_buf);
} offcpu_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct offcpu_buf);
} exit_scratch SEC(".maps");

/* How many syscall_done runs hold this CPU's exit_scratch: one that finds
 * another inside (the one it preempted) drops its record rather than
 * overwrite the other's. Incremented then read, which needs only an
 * atomic add whose result is unused (BPF_XADD, see pending_threads);
 * exchange is 5.12. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} exit_holders SEC(".maps");

/* Kernel types beyond vmlinux.h's, as local CO-RE flavours (the ___offcpu
 * suffix is dropped when matching the kernel's BTF). */

struct rq___offcpu {
	__u64 clock;
} __attribute__((preserve_access_index));

struct cfs_rq___offcpu {
	struct rq___offcpu *rq;
} __attribute__((preserve_access_index));

struct sched_entity___offcpu {
	struct cfs_rq___offcpu *cfs_rq;
} __attribute__((preserve_access_index));

struct task_struct___offcpu {
	void *stack;
	char comm[16];
	unsigned int __state;
	struct sched_entity___offcpu se;
} __attribute__((preserve_access_index));

/* Whether the registers were saved on entry to a system call that has not
 * returned yet, so that its sys_exit is still to come. On x86-64 the
 * entry sets ax to -ENOSYS and the call's return value replaces it before
 * sys_exit: a thread preempted on its way back to user space, after
 * sys_exit, still has the call's number in orig_ax, and would otherwise
 * wait for the next call's exit and take that call's user stack. arm64
 * keeps no such mark (x0 is the first argument, then the return value):
 * there the switch-out tells (yielded). */
#if defined(__TARGET_ARCH_x86)
struct pt_regs___offcpu {
	unsigned long orig_ax; /* the call's number; -1 for interrupts */
	unsigned long ax;
} __attribute__((preserve_access_index));
#define OFFCPU_ENOSYS 38
#define in_syscall(regs) ((long)BPF_CORE_READ((struct pt_regs___offcpu *)(regs), orig_ax) >= 0 && \
			  (long)BPF_CORE_READ((struct pt_regs___offcpu *)(regs), ax) == -OFFCPU_ENOSYS)
#define syscall_nr(regs) ((long)BPF_CORE_READ((struct pt_regs___offcpu *)(regs), orig_ax))
#define NR_EXECVE 59
#define NR_EXECVEAT 322
#define NR_EXIT 60
#define NR_EXIT_GROUP 231
#define yielded(preempt, task) false
#else
/* arm64 sets syscallno on entry (NO_SYSCALL, -1, outside system calls)
 * and leaves it until the next entry, so it alone cannot tell a thread
 * that left the CPU on its way back to user space, past sys_exit, from
 * one still in its call: such a thread would wait for the next call's
 * exit and take that call's user stack. The switch-out tells: on its way
 * out the thread calls schedule() while runnable, where a wait inside a
 * call sleeps (not runnable) or is preempted (cond_resched, an interrupt
 * in a preemptible kernel). sched_yield(2) looks the same, and its record
 * is sent at once, with the user pc alone. */
struct pt_regs___offcpu {
	int syscallno;
} __attribute__((preserve_access_index));
#define in_syscall(regs) (BPF_CORE_READ((struct pt_regs___offcpu *)(regs), syscallno) >= 0)
#define syscall_nr(regs) ((long)BPF_CORE_READ((struct pt_regs___offcpu *)(regs), syscallno))
#define NR_EXECVE 221
#define NR_EXECVEAT 281
#define NR_EXIT 93
#define NR_EXIT_GROUP 94

/* Linux 5.10-5.13's name and type for __state. */
struct task_struct___pre514 {
	long state;
} __attribute__((preserve_access_index));

static __always_inline long task_state(struct task_struct *task)
{
	struct task_struct___offcpu *t = (void *)task;

	if (bpf_core_field_exists(t->__state))
		return t->__state;
	return ((struct task_struct___pre514 *)task)->state;
}

#define yielded(preempt, task) (!(preempt) && task_state(task) == 0 /* TASK_RUNNING */)
#endif

static __always_inline void count(__u32 which)
{
	__u64 *n = bpf_map_lookup_elem(&offcpu_counts, &which);

	if (n)
		*n += 1;
}

/* Whether task's cgroup v2 is cgroup_id or below it: the parent chain is
 * walked by CO-RE reads, as bpf_get_current_ancestor_cgroup_id is not
 * offered to tracing programs before Linux 6.x. */
static __always_inline bool in_cgroup(struct task_struct *task)
{
	struct cgroup *cg = BPF_CORE_READ(task, cgroups, dfl_cgrp);

	return cg && (BPF_CORE_READ(cg, kn, id) == cgroup_id || cgroup_ancestor(cg, cgroup_id));
}

/* Set in task->flags from the start of do_exit (include/linux/sched.h). */
#define OFFCPU_PF_EXITING 0x00000004

static __always_inline bool wanted(struct task_struct *task)
{
	__u32 tgid = task->tgid;

	if (tgid == 0 || tgid == self_tgid || (task->flags & (PF_KTHREAD | OFFCPU_PF_EXITING)))
		return false;
	if (filter_pids && !pid_in(tgid))
		return false;
	if (cgroup_id && !in_cgroup(task))
		return false;
	return true;
}

/* Where the user registers lie (task_pt_regs), as an offset from
 * task->stack: THREAD_SIZE less sizeof(struct pt_regs) less a padding
 * that depends on the architecture and kernel configuration (x86-64 with
 * FRED leaves 16 bytes). Learnt from the first sys_exit, whose argument is
 * that pointer (user space keeps the hook on until then); 0 until then. */
__u64 regs_at;

static __always_inline struct pt_regs *regs_of(struct task_struct *task)
{
	__u64 at = regs_at;

	if (!at)
		return 0;
	return (struct pt_regs *)((__u64)BPF_CORE_READ((struct task_struct___offcpu *)task, stack) + at);
}

/* The generation of the sys_exit hook while it is attached, 0 while it is
 * not: user space attaches the hook, then sets a new generation, and
 * clears it before detaching. A pending record of another generation
 * waited for a hook that was not there, and is dropped. */
__u64 exit_gen;

/* Threads with a record pending: while there are none, sys_exit, which
 * runs for every system call on the host, costs a load and a counter.
 * User space zeroes it when it attaches the hook (no record of the new
 * generation can be pending then). A thread that dies pending leaves it
 * one too high, which costs only lookups until then. Changed with relaxed
 * __atomic_fetch_add, whose result is unused: clang then emits BPF_XADD,
 * where __sync_fetch_and_add gives an atomic fetch-add that Linux 5.10
 * rejects ("BPF_STX uses reserved fields"). */
__u64 pending_threads;

static __always_inline __u64 slot_tag(__u32 tid)
{
	return (tid >> SLOT_SET_BITS) & SLOT_TAG_MASK;
}

static __always_inline __u64 slot_value(__u64 time, __u64 state, __u32 tid)
{
	return (time >> SLOT_TIME_SHIFT) << SLOT_LOW_BITS | state << SLOT_TAG_BITS | slot_tag(tid);
}

static __always_inline __u64 slot_time(__u64 v)
{
	return (v >> SLOT_LOW_BITS) << SLOT_TIME_SHIFT;
}

static __always_inline __u64 slot_state(__u64 v)
{
	return (v >> SLOT_TAG_BITS) & SLOT_STATE_MASK;
}

static __always_inline bool slot_yielded(__u64 v)
{
	return (v >> SLOT_TAG_BITS) & SLOT_YIELDED;
}

static __always_inline struct slot_set *set_of(__u32 tid)
{
	__u32 set = tid & (SLOT_SETS - 1);

	return bpf_map_lookup_elem(&switch_outs, &set);
}

/* The way of set that holds tid, or SLOT_WAYS. */
static __always_inline int way_of(struct slot_set *set, __u32 tid)
{
	__u64 tag = slot_tag(tid);

#pragma unroll
	for (int i = 0; i < SLOT_WAYS; i++) {
		__u64 v = set->way[i];

		if (v && (v & SLOT_TAG_MASK) == tag)
			return i;
	}
	return SLOT_WAYS;
}

/* The time of this switch, read once and only when a followed thread is
 * switched out or in: the clock of this CPU's runqueue, which schedule()
 * has just set (update_rq_clock), reached from the task's CFS runqueue
 * (every task has one, whatever its class, for the CPU it is on). Three
 * loads, where a clock read (bpf_ktime_get_ns) took about 140 ns on a
 * paravirtual VM, most of a switch's cost. It is sched_clock's time: ns,
 * from another origin than CLOCK_MONOTONIC, so only differences of it
 * are used (records carry bpf_ktime_get_ns), and where sched_clock is not
 * kept in step across CPUs (an unstable TSC) a wait that changed CPU may
 * be off by up to a tick. Without CONFIG_FAIR_GROUP_SCHED (no cfs_rq in
 * sched_entity), the clock read. 0: no time to be had. */
static __always_inline __u64 switch_time(struct task_struct *task, __u64 *now)
{
	struct task_struct___offcpu *t = (void *)task;

	if (*now)
		return *now;
	if (bpf_core_field_exists(t->se.cfs_rq)) {
		struct cfs_rq___offcpu *cfs = t->se.cfs_rq;

		*now = cfs ? cfs->rq->clock : 0;
	} else {
		*now = bpf_ktime_get_ns();
	}
	return *now;
}

/* prev, the current task, leaves the CPU: note when, in its own slot, a
 * free one, or the one of the thread off the CPU longest. */
static __always_inline void switch_out(bool preempt, struct task_struct *prev, __u64 *now)
{
	__u32 tid = prev->pid;
	struct slot_set *set;
	__u64 v, state = SLOT_OFF, oldest = ~0ULL, at;
	int i, w;

	if (!wanted(prev) || !(set = set_of(tid)) || !(at = switch_time(prev, now)))
		return;
	w = way_of(set, tid);
	if (w < SLOT_WAYS && slot_state(set->way[w]) == SLOT_PENDING_ON) {
		state = SLOT_PENDING_OFF;
	} else {
		if (w == SLOT_WAYS) {
#pragma unroll
			for (i = 0; i < SLOT_WAYS; i++) {
				v = set->way[i];
				if (!v) {
					w = i;
					break;
				}
				if (v < oldest) { /* the time is in the high bits */
					oldest = v;
					w = i;
				}
			}
			if (i == SLOT_WAYS)
				count(COUNT_DROPPED);
		}
		if (yielded(preempt, prev))
			state |= SLOT_YIELDED;
	}
	if (w < SLOT_WAYS) /* for the verifier */
		set->way[w] = slot_value(at, state, tid);
}

/* Fills the record's header, in this CPU's entry of scratch, for a wait
 * of off ns that ended at back on cpu; the caller adds the frames and
 * sends it. */
static __always_inline struct offcpu_buf *start_record(void *scratch, struct task_struct *task, __u64 off, __u64 back,
						       __u32 cpu)
{
	__u32 at = bpf_get_smp_processor_id();
	struct offcpu_buf *b = bpf_map_lookup_elem(scratch, &at);
	struct offcpu_header *h;

	if (!b)
		return 0;
	h = &b->hdr;
	h->version = OFFCPU_RECORD_VERSION;
	h->flags = 0;
	h->pid = BPF_CORE_READ(task, tgid);
	h->tid = BPF_CORE_READ(task, pid);
	h->cpu = cpu;
	h->stack_bytes = 0;
	h->time = back;
	h->off_ns = off;
	h->pc = h->sp = h->fp = h->lr = 0;
	h->user_frames = 0;
	h->kernel_frames = 0;
	BPF_CORE_READ_INTO(&h->comm, (struct task_struct___offcpu *)task, comm);
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

	if (send_record(&samples, b, size, sizeof(*b) + stack_copy_size, wakeup(&samples, size)))
		count(COUNT_LOST);
	else
		count(COUNT_SENT);
}

/*
 * Whether next waited where no sys_exit will finish its wait, which is
 * then sent at once with no user stack, marked truncated, as the
 * sampler's samples in execve are:
 * - inside an execve (a 64-bit process's), or on its way back to user
 *   space from one, where x86-64 keeps the call's number (arm64 drops it
 *   once the new program is loaded: a wait after that is the new
 *   program's, at its entry point, and is sent with that pc). If the call
 *   succeeds, the thread returns into the new program, where sys_exit
 *   would take the new program's stack for the one the thread waited with
 *   (such waits were shown under _start); and a thread other than the
 *   process's first that execs takes the first one's thread id inside the
 *   call, so its sys_exit would not find the wait it left under its own id
 *   (one in a Go program's exec, which runs on any of its threads, was
 *   lost). The waits of a failing execve (execvp trying each directory of
 *   PATH) lose their user stack too;
 * - inside an exit or exit_group, which never return: on Linux 5.10-6.12
 *   the caller may wait in do_exit's first step (exit_signals takes the
 *   thread group's cgroup lock), and about one exiting Go program in two
 *   left such a wait pending in the kernel matrix;
 * - inside do_exit (PF_EXITING), whatever call the registers name: a
 *   thread killed while it waited in a system call leaves the call through
 *   sys_exit, which finishes that wait with its user stack, and then exits.
 * A wait kept for sys_exit that never comes was lost, and left
 * pending_threads one too high, for every system call on the host to pay a
 * lookup until the hook was next attached.
 */
static __always_inline bool no_sys_exit(struct task_struct *next, struct pt_regs *regs)
{
	long nr;

	if (next->flags & OFFCPU_PF_EXITING)
		return true;
	if (!regs)
		return false;
	nr = syscall_nr(regs);
	return nr == NR_EXECVE || nr == NR_EXECVEAT || nr == NR_EXIT || nr == NR_EXIT_GROUP;
}

/* The wait of next, off the CPU for off ns, reached the minimum: send its
 * record now, with its kernel stack and user pc, or, for a wait in a
 * system call while the sys_exit hook is on, keep it for sys_exit. A
 * thread that yielded on its way back to user space waits for no
 * sys_exit. Returns whether it is pending. */
static __always_inline bool long_wait(struct task_struct *next, __u64 off, bool yielded)
{
	__u64 now = bpf_ktime_get_ns();
	__u32 tid = next->pid, zero = 0, cpu = bpf_get_smp_processor_id();
	struct pt_regs *regs = regs_of(next);
	bool in_call = !regs || (!yielded && in_syscall(regs));
	bool no_exit = no_sys_exit(next, regs);
	__u64 gen = exit_gen;
	struct offcpu_buf *b;
	struct pending *p, *blank;
	long n;

	if (in_call && !no_exit && capture_user && gen) {
		blank = bpf_map_lookup_elem(&pending_blank, &zero);
		if (blank && !bpf_map_update_elem(&pendings, &tid, blank, BPF_ANY) &&
		    (p = bpf_map_lookup_elem(&pendings, &tid))) {
			p->off_ns = off;
			p->back = now;
			p->gen = gen;
			p->cpu = cpu;
			p->kernel_frames = 0;
			if (capture_kernel) {
				n = bpf_get_task_stack(next, p->kernel, sizeof(p->kernel), 0);
				if (n > 0)
					p->kernel_frames = n / sizeof(__u64);
			}
			__atomic_fetch_add(&pending_threads, 1, __ATOMIC_RELAXED);
			return true;
		}
		/* No room: send it as if the hook were off. */
	}
	b = start_record(&offcpu_scratch, next, off, now, cpu);
	if (!b)
		return false;
	if (capture_kernel) {
		n = bpf_get_task_stack(next, b->frames, OFFCPU_KERNEL_FRAMES * sizeof(__u64), 0);
		if (n > 0)
			b->hdr.kernel_frames = n / sizeof(__u64);
	}
	if (capture_user && no_exit) {
		b->hdr.flags |= SAMPLE_USER_TRUNCATED;
	} else if (capture_user && regs) {
		__u32 at = b->hdr.kernel_frames;

		user_regs(&b->hdr, regs);
		if (b->hdr.pc && at < OFFCPU_FRAMES) {
			b->frames[at] = b->hdr.pc;
			b->hdr.user_frames = 1;
			b->hdr.flags |= SAMPLE_USER_TRUNCATED;
		}
		if (in_call)
			count(COUNT_CUT);
	}
	send(b);
	return false;
}

/* next is about to run again: if it was followed off the CPU, free its
 * slot; a wait long enough gets its record. */
static __always_inline void switch_in(struct task_struct *next, __u64 *at)
{
	__u32 tid = next->pid;
	struct slot_set *set = set_of(tid);
	struct pending *p;
	__u64 v, off, now;
	int w;

	if (!set)
		return;
	w = way_of(set, tid);
	if (w >= SLOT_WAYS)
		return;
	v = set->way[w];
	now = switch_time(next, at);
	/* No time, or a clock behind the switch-out's: a wait too short to
	 * tell. */
	off = now > slot_time(v) ? now - slot_time(v) : 0;
	switch (slot_state(v)) {
	case SLOT_PENDING_OFF:
		p = bpf_map_lookup_elem(&pendings, &tid);
		if (p && p->off_ns && exit_gen && p->gen == exit_gen) {
			p->off_ns += off;
			set->way[w] = slot_value(now, SLOT_PENDING_ON, tid);
			return;
		}
		/* Its system call returned while the hook was off: that
		 * record is lost, and this is a wait of its own. */
		count(COUNT_DROPPED);
		/* fallthrough */
	case SLOT_OFF:
		if (off < off_cpu_min_ns) {
			set->way[w] = 0;
			if (count_short)
				count(COUNT_SHORT);
			return;
		}
		/* Pending from here, so that the thread's next switch-out
		 * (before its system call returns) finds it so. */
		set->way[w] = slot_value(now, SLOT_PENDING_ON, tid);
		if (!long_wait(next, off, slot_yielded(v)))
			set->way[w] = 0;
		return;
	}
}

/* Only the first three arguments, which every kernel since 5.5 passes
 * (5.18 appended prev_state). */
SEC("tp_btf/sched_switch")
int BPF_PROG(switch_task, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	__u64 now = 0;

	switch_out(preempt, prev, &now);
	switch_in(next, &now);
	return 0;
}

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

	h->flags |= SAMPLE_STACK_COPY | SAMPLE_STACK_COPY_TRUNCATED;
	if (at > OFFCPU_FRAMES || !sp)
		return;
	dst = (__u8 *)&b->frames[at];
	for (i = 0; i < COPY_TRIES; i++) {
		if (n > stack_copy_size) /* for the verifier */
			n = stack_copy_size;
		if (n == 0 || !bpf_probe_read_user(dst, n, (void *)sp))
			break;
		h->flags |= SAMPLE_STACK_COPY_FAULT;
		mid = (sp + n / 2) & ~4095ULL;
		n = mid > sp ? mid - sp : 0;
	}
	if (i < COPY_TRIES)
		h->stack_bytes = n;
}

/* Frees tid's slot once its pending record is done. */
static __always_inline void forget_pending(__u32 tid)
{
	struct slot_set *set = set_of(tid);
	int w;

	if (!set)
		return;
	w = way_of(set, tid);
	if (w < SLOT_WAYS && slot_state(set->way[w]) == SLOT_PENDING_ON)
		set->way[w] = 0;
}

/* A system call returns: finish the record of a wait inside it with the
 * user stack, which is still the one the thread left the CPU with. */
SEC("tp_btf/sys_exit")
int BPF_PROG(syscall_done, struct pt_regs *regs, long ret)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct task_struct *task;
	struct pending *p;
	struct offcpu_buf *b;
	__u32 at, nk, zero = 0;
	__u64 *holders;
	long n;

	count(COUNT_EXITS);
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
	p = bpf_map_lookup_elem(&pendings, &tid);
	if (!p || !p->off_ns)
		return 0;
	forget_pending(tid);
	if (p->gen != exit_gen) {
		/* Noted before the hook last went off and on: pending_threads
		 * was zeroed since. */
		p->off_ns = 0;
		count(COUNT_DROPPED);
		return 0;
	}
	__atomic_fetch_add(&pending_threads, -1, __ATOMIC_RELAXED);
	holders = bpf_map_lookup_elem(&exit_holders, &zero);
	if (!holders)
		return 0;
	__atomic_fetch_add(holders, 1, __ATOMIC_RELAXED);
	if (*holders != 1) {
		p->off_ns = 0;
		count(COUNT_DROPPED);
		goto out;
	}
	task = (struct task_struct *)bpf_get_current_task();
	b = start_record(&exit_scratch, task, p->off_ns, p->back, p->cpu);
	p->off_ns = 0;
	if (!b)
		goto out;
	nk = p->kernel_frames;
	if (nk > OFFCPU_KERNEL_FRAMES)
		nk = OFFCPU_KERNEL_FRAMES;
	b->hdr.kernel_frames = nk;
	bpf_probe_read_kernel(b->frames, nk * sizeof(__u64), p->kernel);
	user_regs(&b->hdr, regs);
	at = b->hdr.kernel_frames;
	if (at <= OFFCPU_KERNEL_FRAMES) {
		n = bpf_get_stack(ctx, &b->frames[at], OFFCPU_USER_FRAMES * sizeof(__u64), OFFCPU_F_USER_STACK);
		if (n > 0) {
			b->hdr.user_frames = n / sizeof(__u64);
			if (b->hdr.user_frames == OFFCPU_USER_FRAMES)
				b->hdr.flags |= SAMPLE_USER_TRUNCATED;
		}
	}
	if (stack_copy_size) {
		__u32 tgid = b->hdr.pid;

		if (copy_all || (marks_of(tgid) & MARK_COPY))
			copy_stack(b, at + b->hdr.user_frames);
	}
	send(b);
out:
	__atomic_fetch_add(holders, -1, __ATOMIC_RELAXED);
	return 0;
}
