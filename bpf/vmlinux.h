/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The kernel types sprof's BPF program touches, and nothing else.
 *
 * A full vmlinux.h dumped by bpftool is 3-5 MB per architecture and can only
 * be produced on a running kernel of that architecture. sprof reads a handful
 * of fields, so this header declares just those, marked preserve_access_index:
 * clang then emits CO-RE relocations by field name, and the loader resolves
 * them against the running kernel's BTF (/sys/kernel/btf/vmlinux). Field
 * order and the absence of other members do not matter; names and types do.
 *
 * The include guard is the one bpftool's vmlinux.h uses, which tells libbpf's
 * bpf_tracing.h to use the kernel's pt_regs field names (ip, sp, bp) rather
 * than the UAPI ones.
 */
#ifndef __VMLINUX_H__
#define __VMLINUX_H__

typedef signed char __s8;
typedef unsigned char __u8;
typedef short __s16;
typedef unsigned short __u16;
typedef int __s32;
typedef unsigned int __u32;
typedef long long __s64;
typedef unsigned long long __u64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef _Bool bool;
#define true 1
#define false 0

/* UAPI constants (include/uapi/linux/bpf.h); their values are ABI. */
enum {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PROG_ARRAY = 3,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_LPM_TRIE = 11,
	BPF_MAP_TYPE_ARRAY_OF_MAPS = 12,
	BPF_MAP_TYPE_RINGBUF = 27,
};
enum {
	BPF_F_NO_PREALLOC = 1,
	BPF_F_MMAPABLE = 1024,
};
enum {
	BPF_ANY = 0,
	BPF_NOEXIST = 1,
};
enum {
	BPF_RB_NO_WAKEUP = 1,
	BPF_RB_FORCE_WAKEUP = 2,
};
enum {
	BPF_RB_AVAIL_DATA = 0,
	BPF_RB_RING_SIZE = 1,
	BPF_RB_CONS_POS = 2,
};

/* include/linux/sched.h */
#define PF_KTHREAD 0x00200000

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

struct vm_area_struct {
	unsigned long vm_start;
	unsigned long vm_end;
};

typedef struct {
	int counter;
} atomic_t;

struct signal_struct {
	atomic_t live; /* threads of the group that have not exited */
};

struct mm_struct {
	unsigned long start_stack;
	unsigned long env_end;
};

struct kernfs_node {
	__u64 id; /* a u64 since 5.5 */
};

struct cgroup_subsys_state {
	struct cgroup_subsys_state *parent;
};

struct cgroup {
	struct cgroup_subsys_state self; /* its parent is the parent cgroup's self */
	struct kernfs_node *kn;
};

struct css_set {
	struct cgroup *dfl_cgrp; /* the cgroup v2 cgroup */
};

#if defined(__TARGET_ARCH_x86)
/* The user thread pointer, saved here by arch_prctl(ARCH_SET_FS) and
 * clone(CLONE_SETTLS), the ways Go's runtime and C libraries set it. */
struct thread_struct {
	unsigned long fsbase;
};
#endif

struct task_struct {
	unsigned int flags;
	int pid;
	int tgid;
	void *stack; /* the kernel stack, THREAD_SIZE bytes ending with the user pt_regs */
	struct mm_struct *mm;
	struct signal_struct *signal;
	struct css_set *cgroups;
	char comm[16]; /* TASK_COMM_LEN */
	unsigned int in_execve : 1; /* CO-RE finds the bit */
#if defined(__TARGET_ARCH_x86)
	struct thread_struct thread;
#endif
};

#if defined(__TARGET_ARCH_x86)
struct pt_regs {
	unsigned long bp;
	unsigned long ip;
	/* A union of u16 cs with the 64-bit csx slot since 6.9 (FRED): read
	 * as 16 bits, it is the selector on every kernel. Likewise ss. */
	unsigned short cs;
	unsigned long sp;
	unsigned short ss;
};
#elif defined(__TARGET_ARCH_arm64)
/* arm64's kernel pt_regs starts with the user-visible part; bpf_tracing.h
 * reads registers through this type. */
struct user_pt_regs {
	__u64 regs[31];
	__u64 sp;
	__u64 pc;
	__u64 pstate;
};
/* Its first fields, inside an anonymous union in the kernel; declared for
 * its size (bpf_core_type_size) and pstate. */
struct pt_regs {
	__u64 regs[31];
	__u64 sp;
	__u64 pc;
	__u64 pstate;
};
#else
#error "sprof's BPF program supports x86-64 and arm64 only"
#endif

#pragma clang attribute pop

/* The perf_event program's context (include/uapi/linux/bpf_perf_event.h),
 * whose layout is ABI: the verifier checks reads of it at these offsets,
 * so it takes no CO-RE relocations. regs is bpf_user_pt_regs_t: on amd64
 * the kernel's struct pt_regs, on arm64 struct user_pt_regs. The registers
 * of the interrupted context: user or kernel mode. */
#if defined(__TARGET_ARCH_x86)
struct sample_regs {
	unsigned long r15, r14, r13, r12, bp, bx, r11, r10, r9, r8, ax, cx, dx, si, di, orig_ax, ip;
	unsigned long cs; /* read whole: the context allows only 8-byte reads of regs */
	unsigned long flags, sp, ss;
};
#elif defined(__TARGET_ARCH_arm64)
struct sample_regs {
	__u64 regs[31];
	__u64 sp;
	__u64 pc;
	__u64 pstate;
};
/* arch/arm64/include/uapi/asm/ptrace.h */
#define PSR_MODE_EL0t 0x00000000
#define PSR_MODE_MASK 0x0000001f /* includes PSR_MODE32_BIT: AArch32 is not ours */
#endif

struct bpf_perf_event_data {
	struct sample_regs regs;
	__u64 sample_period;
	__u64 addr;
};

#endif /* __VMLINUX_H__ */
