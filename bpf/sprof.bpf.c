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

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/*
 * Record layout. Version 2 is the header below followed by kernel_frames
 * kernel addresses and then user_frames user addresses, all u64, native byte
 * order, and then, when SAMPLE_STACK_COPY is set, stack_bytes bytes of the
 * user stack from sp upward. Version 1 had no stack copy and a zero pad word
 * where stack_bytes is. A later version may append more after these
 * (announced by a flag and a version bump); readers reject versions they do
 * not know.
 */
enum record_version {
	RECORD_VERSION = 2,
};

enum sample_flag {
	/* The frame-pointer walk stopped at a frame record that failed a check
	 * (outside the stack, misaligned, not above the previous one,
	 * unreadable) or at the depth limit: frames are missing at the root. */
	SAMPLE_USER_TRUNCATED = 1 << 0,
	/* The frame-pointer register did not name the leaf's frame record (a
	 * prologue, an epilogue or a frameless leaf): frame 1, the leaf's
	 * return address, came from the top of the stack (x86-64) or the link
	 * register (arm64). See leaf_return. */
	SAMPLE_LEAF_RETURN = 1 << 1,
	/* The record ends with a copy of the user stack (stack_bytes bytes,
	 * possibly none). */
	SAMPLE_STACK_COPY = 1 << 2,
	/* The copy ends below the stack's end: the stack is deeper than
	 * stack_copy_size, or a read fault cut it short. */
	SAMPLE_STACK_COPY_TRUNCATED = 1 << 3,
	/* Reading the stack faulted (a page not resident, or the bound was a
	 * guess): the copy is the longest shorter prefix that could be read,
	 * possibly empty. See copy_stack. */
	SAMPLE_STACK_COPY_FAULT = 1 << 4,
};

enum record_limits {
	MAX_KERNEL_FRAMES = 128,
	MAX_USER_FRAMES = 1024,
	MAX_FRAMES = MAX_KERNEL_FRAMES + MAX_USER_FRAMES,
	/* The loader refuses larger stack_copy_size values; perf's limit for
	 * --call-graph dwarf is about the same (65528). */
	MAX_STACK_COPY = 1 << 16,
};

/* Ancestor levels searched by the cgroup filter. */
#define MAX_CGROUP_LEVELS 32

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
 * every process rather than only those in copy_pids. */
volatile const __u32 stack_copy_size;
volatile const bool copy_all;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20); /* resized by the loader */
} samples SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32); /* tgid */
	__type(value, __u8);
} pids SEC(".maps");

/* Processes whose samples carry a stack copy, marked by user space because
 * some of their code cannot be unwound by frame pointers. Preallocated, as
 * perf_event programs need before Linux 6.1. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32); /* tgid */
	__type(value, __u8);
} copy_pids SEC(".maps");

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

static __always_inline bool in_cgroup(void)
{
	if (bpf_get_current_cgroup_id() == cgroup_id)
		return true;
	/* A descendant of the cgroup: compare the ancestors from the root
	 * down; an id of 0 means we went past the task's own level. */
	for (int level = 0; level < MAX_CGROUP_LEVELS; level++) {
		__u64 id = bpf_get_current_ancestor_cgroup_id(level);
		if (id == cgroup_id)
			return true;
		if (id == 0)
			return false;
	}
	return false;
}

static __always_inline bool wanted(__u32 tgid)
{
	if (tgid == 0)
		return include_idle;
	if (tgid == self_tgid)
		return false;
	if (filter_pids && !bpf_map_lookup_elem(&pids, &tgid))
		return false;
	if (cgroup_id && !in_cgroup())
		return false;
	return true;
}

/* The mapping that held a thread's stack pointer last time. */
struct stack_vma {
	__u64 start;
	__u64 end;
};

/* bpf_find_vma costs microseconds in interrupt context (it takes the mmap
 * lock and releases it through irq_work), so each thread remembers its stack
 * mapping. A stale entry (the mapping unmapped and replaced while the thread
 * lives, e.g. a coroutine stack pool) can only make the bound too tight or
 * too loose; every frame is still read with a checked user read. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct stack_vma);
} stack_vmas SEC(".maps");

static long stack_vma_cb(struct task_struct *task, struct vm_area_struct *vma, void *data)
{
	struct stack_vma *v = data;

	v->start = vma->vm_start;
	v->end = vma->vm_end;
	return 0;
}

/* The stack holding sp: records lie in [lo, end); the whole mapping, which
 * a record on another stack must lie outside of, is [lo, mapped_end).
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
 * not known (with lookup false, or the mmap lock is contended), 8 MiB on
 * either side of sp: the default RLIMIT_STACK and pthread stack size. The
 * per-thread memory cut bpf_find_vma calls by 59% under a build load; a
 * program run can make only one such call (its lock is released through a
 * per-CPU irq_work), so only the sample's own sp looks its mapping up. */
#define MAIN_STACK_SPAN (64 << 20)
#define UNKNOWN_STACK_SPAN (8 << 20)

struct stack_bounds {
	__u64 lo, end, mapped_end;
};

static __always_inline struct stack_bounds stack_of(__u64 sp, bool lookup)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct stack_vma found = {}, *cached;
	__u64 top = BPF_CORE_READ(task, mm, start_stack);

	if (sp < top && top - sp < MAIN_STACK_SPAN) {
		__u64 strings = BPF_CORE_READ(task, mm, env_end);

		return (struct stack_bounds){top - MAIN_STACK_SPAN, top, strings + 2 * 4096};
	}
	cached = bpf_task_storage_get(&stack_vmas, task, 0, lookup ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
	if (cached && cached->start <= sp && sp < cached->end)
		return (struct stack_bounds){cached->start, cached->end, cached->end};
	if (lookup) {
		bpf_find_vma(task, sp, stack_vma_cb, &found, 0);
		if (found.start <= sp && sp < found.end) {
			if (cached)
				*cached = found;
			return (struct stack_bounds){found.start, found.end, found.end};
		}
	}
	return (struct stack_bounds){sp - UNKNOWN_STACK_SPAN, sp + UNKNOWN_STACK_SPAN, sp + UNKNOWN_STACK_SPAN};
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
 *     or a call through a PLT or GOT entry on x86-64) whose target lies at
 *     most LEAF_MAX_SIZE bytes below pc: the candidate's call is what entered
 *     the function pc is in. On arm64, lr must also not lie in that range,
 *     which is the case of a framed function whose last call returned.
 *
 * Case 2 reads code and can in principle be fooled by data that looks like
 * such a return address; it needs a direct or PLT call and a leaf smaller
 * than LEAF_MAX_SIZE, otherwise the caller stays missing (never guessed).
 */
#define LEAF_MAX_SIZE (8 << 10)
#define MIN_USER_ADDR (64 << 10)
/* Above every user address space (x86-64 with 5-level paging ends at 2^56,
 * arm64 at 2^52): a return address there is garbage such as -1, no frame. */
#define MAX_USER_ADDR (1ULL << 56)

/* arm64 return addresses may carry a pointer authentication code in their
 * top bits; user addresses fit in 48 bits (Linux's default user VA size). */
#if defined(__TARGET_ARCH_arm64)
#define code_addr(x) ((x) & 0x0000ffffffffffffULL)
#else
#define code_addr(x) (x)
#endif

#if defined(__TARGET_ARCH_x86)
static __always_inline __s32 rel32(const __u8 *p)
{
	return (__s32)((__u32)p[0] | (__u32)p[1] << 8 | (__u32)p[2] << 16 | (__u32)p[3] << 24);
}

/* Whether the call that returns to ret entered the function holding pc:
 * its target is at most LEAF_MAX_SIZE below pc. The call is call rel32,
 * maybe to a PLT stub (jmp *GOT(%rip), optionally after endbr64 and bnd)
 * that is followed to the GOT entry, or -fno-plt style call *GOT(%rip).
 * Candidates below mmap_min_addr's default (64 KiB) are small integers, not
 * code addresses; skipping them avoids most faulting reads, each of which
 * costs microseconds. */
static __always_inline bool entered_from(__u64 ret, __u64 pc)
{
	__u8 site[6], stub[11];
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
	if (target < MIN_USER_ADDR || bpf_probe_read_user(stub, sizeof(stub), (void *)target))
		return false;
	if (stub[0] == 0xff && stub[1] == 0x25) /* jmp *rel32(%rip) */
		bpf_probe_read_user(&got, sizeof(got), (void *)(target + 6 + rel32(&stub[2])));
	else if (stub[0] == 0xf3 && stub[1] == 0x0f && stub[2] == 0x1e && stub[3] == 0xfa) {
		if (stub[4] == 0xf2 && stub[5] == 0xff && stub[6] == 0x25) /* endbr64; bnd jmp */
			bpf_probe_read_user(&got, sizeof(got), (void *)(target + 11 + rel32(&stub[7])));
		else if (stub[4] == 0xff && stub[5] == 0x25) /* endbr64; jmp */
			bpf_probe_read_user(&got, sizeof(got), (void *)(target + 10 + rel32(&stub[6])));
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

static __always_inline __u64 leaf_return(__u64 pc, __u64 sp, __u64 lr)
{
	__u8 insn[8];
	__u64 ret = 0;
	int slot = -1;
	bool prologue = false;

	if (bpf_probe_read_user(insn, sizeof(insn), (void *)pc))
		return 0;
	if (insn[0] == 0xf3 && insn[1] == 0x0f && insn[2] == 0x1e && insn[3] == 0xfa && insn[4] == 0x55)
		slot = 0, prologue = true; /* endbr64; push %rbp */
	else if (insn[0] == 0x55)
		slot = 0, prologue = true; /* push %rbp */
	else if (insn[0] == 0x48 && insn[1] == 0x89 && insn[2] == 0xe5)
		slot = 8, prologue = true; /* mov %rsp,%rbp */
	else if (insn[0] == 0xc3 || (insn[0] == 0xf3 && insn[1] == 0xc3))
		slot = 0; /* ret, rep ret */
	if (bpf_probe_read_user(&ret, sizeof(ret), (void *)(sp + (slot > 0 ? slot : 0))))
		return 0;
	/* Code without frame pointers pushes %rbp as a callee-saved register,
	 * not always first: there the slot need not hold a return address. */
	if (prologue)
		return after_call(ret) ? ret : 0;
	if (slot == 0)
		return ret;
	return entered_from(ret, pc) ? ret : 0;
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

static __always_inline __u64 leaf_return(__u64 pc, __u64 sp, __u64 lr)
{
	__u32 insn, bl;
	__u64 target;

	if (bpf_probe_read_user(&insn, sizeof(insn), (void *)pc))
		return 0;
	if (insn == 0xd503233f || insn == 0xd503245f ||   /* paciasp, bti c */
	    (insn & 0xffc07fff) == 0xa9807bfd ||          /* stp x29, x30, [sp, #imm]! */
	    (insn & 0xffc07fff) == 0xa9007bfd ||          /* stp x29, x30, [sp, #imm] */
	    insn == 0x910003fd ||                         /* mov x29, sp */
	    insn == 0xd65f03c0 || insn == 0xd65f0bff || insn == 0xd65f0fff) /* ret, retaa, retab */
		return lr;
	if (lr < MIN_USER_ADDR || bpf_probe_read_user(&bl, sizeof(bl), (void *)(lr - 4)) ||
	    (bl & 0xfc000000) != 0x94000000)
		return 0;
	target = lr - 4 + (__s64)((__s32)(bl << 6) >> 6) * 4;
	if (target <= pc && pc - target < LEAF_MAX_SIZE && !(target <= lr && lr - target < LEAF_MAX_SIZE))
		return lr;
	return 0;
}
#endif

/* The walk's state lives in map memory, not on the stack: the verifier then
 * sees unknown values at every fp_step call, checks the callback once and
 * does not unroll 1024 iterations. */
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
};

/* Followed in the map value by stack_copy_size bytes of room for the copy. */
struct scratch_value {
	struct fp_walk walk;
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

struct walk_ctx {
	struct scratch_value *s;
};

static __always_inline void put_user_frame(struct scratch_value *s, __u64 addr)
{
	struct fp_walk *w = &s->walk;
	__u32 at = w->at;

	if (at >= MAX_FRAMES || w->n >= MAX_USER_FRAMES) {
		w->flags |= SAMPLE_USER_TRUNCATED;
		return;
	}
	s->rec.frames[at] = addr;
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
 * walk then goes on within that mapping, strictly increasing again. */
#define MAX_STACK_SWITCHES 3

static __always_inline bool switch_stack(struct fp_walk *w, __u64 fp, __u64 ret)
{
	struct stack_bounds to;

	if (w->switches >= MAX_STACK_SWITCHES || (w->stack_lo <= fp && fp < w->mapped_end) ||
	    !after_call(ret))
		return false;
	to = stack_of(fp, false);
	if (fp > to.end - 2 * sizeof(__u64))
		return false;
	w->switches++;
	w->end = to.end;
	w->stack_lo = to.lo;
	w->mapped_end = to.mapped_end;
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
static long fp_step(__u64 i, struct walk_ctx *c)
{
	struct scratch_value *s = c->s;
	struct fp_walk *w = &s->walk;
	__u64 fp = w->fp;
	__u64 rec[2], ret;

	if (fp == 0)
		return 1;
	if ((fp & 7) || bpf_probe_read_user(rec, sizeof(rec), (void *)fp)) {
		w->flags |= SAMPLE_USER_TRUNCATED;
		return 1;
	}
	ret = code_addr(rec[1]);
	if ((fp < w->lo || fp > w->end - sizeof(rec)) && !switch_stack(w, fp, ret)) {
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

/* Frame 0 is pc; then the leaf's return address when the frame-pointer
 * register does not name the leaf's record (see leaf_return); then the
 * frame-pointer chain from fp. */
static __always_inline void walk_user(struct scratch_value *s, __u64 pc, __u64 sp, __u64 fp, __u64 lr,
					struct stack_bounds *stack)
{
	struct walk_ctx c = {.s = s};
	struct fp_walk *w = &s->walk;
	__u64 ret;

	put_user_frame(s, pc);
	ret = leaf_return(pc, sp, code_addr(lr));
	if (ret) {
		put_user_frame(s, ret);
		w->flags |= SAMPLE_LEAF_RETURN;
	}
	w->end = stack->end;
	w->lo = sp;
	w->stack_lo = stack->lo;
	w->mapped_end = stack->mapped_end;
	w->switches = 0;
	w->fp = fp;
	bpf_loop(MAX_USER_FRAMES, fp_step, &c, 0);
}

/* Shorter copies tried after a fault, halving at 4 KiB boundaries (a
 * multiple of every page size) down to the rest of sp's page. A fault means
 * a page in the range is not resident (swapped out) or lies outside the
 * stack when stack_of had to guess; bpf_probe_read_user then fails whole
 * and says nothing of where, so the prefix is searched for. Each failed
 * read costs a page-fault exception; 4 tries bound that. */
#define COPY_TRIES 4
#define COPY_GRAIN 4096ULL

static __always_inline __u64 shorter_copy(__u64 sp, __u64 n)
{
	__u64 mid = (sp + n / 2) & ~(COPY_GRAIN - 1);
	__u64 page = ((sp + COPY_GRAIN) & ~(COPY_GRAIN - 1)) - sp;

	if (mid > sp)
		return mid - sp;
	return page < n ? page : 0;
}

/* Appends up to stack_copy_size bytes of the user stack from sp upward,
 * never past end, right after the frames. Only the used part goes into the
 * ring. */
static __always_inline void copy_stack(struct scratch_value *s, __u64 sp, __u64 end)
{
	struct fp_walk *w = &s->walk;
	__u32 at = w->at;
	__u64 want = end - sp, n;
	__u8 *dst;
	int i;

	w->flags |= SAMPLE_STACK_COPY;
	if (want > stack_copy_size) {
		want = stack_copy_size;
		w->flags |= SAMPLE_STACK_COPY_TRUNCATED;
	}
	if (at > MAX_FRAMES) /* never; tells the verifier where dst can be */
		return;
	dst = (__u8 *)&s->rec.frames[at];
	n = want;
	for (i = 0; i < COPY_TRIES; i++) {
		if (n > stack_copy_size) /* for the verifier: shorter_copy only shortens */
			n = stack_copy_size;
		if (n == 0 || !bpf_probe_read_user(dst, n, (void *)sp))
			break;
		n = shorter_copy(sp, n);
	}
	if (i == COPY_TRIES)
		n = 0;
	if (n < want)
		w->flags |= SAMPLE_STACK_COPY_FAULT | SAMPLE_STACK_COPY_TRUNCATED;
	s->rec.hdr.stack_bytes = n;
}

/*
 * When to wake user space. Never per sample: a wakeup is an irq_work and a
 * context switch, as dear as a sample. The reader is woken once when the
 * ring passes a quarter full (WAKE_DRAIN: user space drains it) and once
 * more when it passes half (WAKE_SPILL: user space was too busy to drain
 * and moves the records out of the ring into its own memory), each time at
 * most once per consumer position, that is until the reader has read
 * something. So the ring can be small enough to stay in the caches: with
 * stack copies, writing records into ring memory that no cache holds was
 * most of a sample's cost. woken_at holds the consumer position + 1 at each
 * level's last wakeup (0: none yet); two CPUs racing may both wake, which
 * is harmless.
 */
enum wake_level {
	WAKE_DRAIN,
	WAKE_SPILL,
	WAKE_LEVELS,
};

__u64 woken_at[WAKE_LEVELS];

static __always_inline __u64 wakeup(__u64 size)
{
	__u64 ring = bpf_ringbuf_query(&samples, BPF_RB_RING_SIZE);
	__u64 avail = bpf_ringbuf_query(&samples, BPF_RB_AVAIL_DATA) + size;
	__u64 at = bpf_ringbuf_query(&samples, BPF_RB_CONS_POS) + 1;
	int level;

	if (avail >= ring / 2)
		level = WAKE_SPILL;
	else if (avail >= ring / 4)
		level = WAKE_DRAIN;
	else
		return BPF_RB_NO_WAKEUP;
	if (woken_at[level] == at)
		return BPF_RB_NO_WAKEUP;
	woken_at[level] = at;
	return BPF_RB_FORCE_WAKEUP;
}

static __always_inline bool wants_copy(__u32 tgid)
{
	return stack_copy_size && capture_user && (copy_all || bpf_map_lookup_elem(&copy_pids, &tgid));
}

SEC("perf_event")
int sample(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	__u32 zero = 0, cpu;
	struct scratch_value *s;
	struct sample_header *h;
	struct task_struct *task;
	__u64 size, *count;
	long n;

	if (!wanted(tgid))
		return 0;
	cpu = bpf_get_smp_processor_id();
	s = bpf_map_lookup_elem(&scratch, &cpu);
	if (!s)
		return 0;
	h = &s->rec.hdr;
	s->walk.at = 0;
	s->walk.n = 0;
	s->walk.flags = 0;

	h->version = RECORD_VERSION;
	h->pid = tgid;
	h->tid = (__u32)id;
	h->cpu = cpu;
	h->stack_bytes = 0;
	h->time = bpf_ktime_get_ns();
	h->pc = 0;
	h->sp = 0;
	h->fp = 0;
	h->lr = 0;
	bpf_get_current_comm(h->comm, sizeof(h->comm));

	if (capture_kernel) {
		n = bpf_get_stack(ctx, s->rec.frames, MAX_KERNEL_FRAMES * sizeof(__u64), 0);
		if (n > 0)
			s->walk.at = n / sizeof(__u64);
	}
	h->kernel_frames = s->walk.at;

	task = bpf_get_current_task_btf();
	if (!(task->flags & PF_KTHREAD)) {
		struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);

		h->pc = PT_REGS_IP_CORE(regs);
		h->sp = PT_REGS_SP_CORE(regs);
		h->fp = PT_REGS_FP_CORE(regs);
#if defined(__TARGET_ARCH_arm64)
		h->lr = PT_REGS_RET_CORE(regs);
#endif
		if (capture_user && h->pc) {
			struct stack_bounds stack = stack_of(h->sp, true);

			walk_user(s, h->pc, h->sp, h->fp, h->lr, &stack);
			if (wants_copy(tgid))
				copy_stack(s, h->sp, stack.end);
		}
	}
	h->user_frames = s->walk.n;
	h->flags = s->walk.flags;

	size = sizeof(*h) + (__u64)s->walk.at * sizeof(__u64) + h->stack_bytes;
	if (size > sizeof(s->rec) + stack_copy_size)
		size = sizeof(s->rec) + stack_copy_size;
	if (bpf_ringbuf_output(&samples, &s->rec, size, wakeup(size)))
		count = bpf_map_lookup_elem(&lost, &zero);
	else
		count = bpf_map_lookup_elem(&sent, &zero);
	if (count)
		*count += 1;
	return 0;
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
	__u8 one = 1;

	if (ptgid == ctgid)
		return 0;
	if (follow_forks && bpf_map_lookup_elem(&pids, &ptgid))
		bpf_map_update_elem(&pids, &ctgid, &one, BPF_ANY);
	if (stack_copy_size && !copy_all && bpf_map_lookup_elem(&copy_pids, &ptgid))
		bpf_map_update_elem(&copy_pids, &ctgid, &one, BPF_ANY);
	return 0;
}

/* With a pid filter or stack copies for marked processes: a process leaves
 * both sets when its last thread exits, so a reused pid is not sampled or
 * copied and followed forks do not fill the map. do_exit decrements
 * signal->live before this tracepoint fires. */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(forget_exit, struct task_struct *task)
{
	__u32 tgid = task->tgid;

	if (task->signal->live.counter == 0) {
		bpf_map_delete_elem(&pids, &tgid);
		bpf_map_delete_elem(&copy_pids, &tgid);
	}
	return 0;
}
