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
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_RINGBUF = 27,
	BPF_MAP_TYPE_TASK_STORAGE = 29,
};
enum {
	BPF_F_NO_PREALLOC = 1,
};
enum {
	BPF_LOCAL_STORAGE_GET_F_CREATE = 1,
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

struct task_struct {
	unsigned int flags;
	int pid;
	int tgid;
	struct mm_struct *mm;
	struct signal_struct *signal;
};

#if defined(__TARGET_ARCH_x86)
struct pt_regs {
	unsigned long bp;
	unsigned long ip;
	unsigned long sp;
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
struct pt_regs;
#else
#error "sprof's BPF program supports x86-64 and arm64 only"
#endif

#pragma clang attribute pop

/* The perf_event program's context (include/uapi/linux/bpf_perf_event.h).
 * Only passed through to helpers, never read field by field. */
struct bpf_perf_event_data;

#endif /* __VMLINUX_H__ */
