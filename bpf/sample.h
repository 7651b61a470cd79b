/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * What sprof's two BPF programs share: sprof.bpf.c (CPU samples) and
 * offcpu.bpf.c (off-CPU waits) write records into one ring, which one
 * reader drains, with the same flags, the same policy for waking that
 * reader, and the same pid and cgroup filters. Each program is an object
 * of its own, so each gets its own copy of what this defines (woken_at
 * included). Include after vmlinux.h and libbpf's headers.
 */
#ifndef SPROF_SAMPLE_H
#define SPROF_SAMPLE_H

#include "pidset.h"

/* A record's flags: the same bits in both programs' records. */
enum sample_flag {
	/* The frame-pointer walk stopped at a frame record that failed a check
	 * (outside the stack, misaligned, not above the previous one,
	 * unreadable) or at the depth limit: frames are missing at the root.
	 * Also set when the leaf's caller could not be told (arm64, see
	 * leaf_return in sprof.bpf.c): the stack may lack that frame. */
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
	/* The user frames are followed by the Python frames of a CPython
	 * process (python.bpf.h). */
	SAMPLE_PYTHON = 1 << 5,
	/* The user frames come from the in-kernel walk over unwind tables
	 * (sprof.bpf.c, table_step); without SAMPLE_USER_TRUNCATED they end
	 * at the thread's outermost frame and the record has no stack copy. */
	SAMPLE_USER_TABLES = 1 << 6,
	/* A Go walk that met runtime.morestack went on at the goroutine whose
	 * stack grows (sprof.bpf.c, follow_goroutine): the frames after
	 * morestack's are that goroutine's. A walk through morestack without
	 * it may have skipped frames there (user space cuts it). */
	SAMPLE_GOROUTINE = 1 << 7,
};

/* Ancestor levels searched by the cgroup filter. */
#define MAX_CGROUP_LEVELS 32

/*
 * When to wake user space. Never per record: a wakeup is an irq_work and a
 * context switch, as dear as a sample. The reader is woken once when the
 * ring passes a quarter full (WAKE_DRAIN: user space drains it) and once
 * more when it passes half (WAKE_SPILL: user space was too busy to drain
 * and moves the records out of the ring into its own memory), each time at
 * most once per consumer position, that is until the reader has read
 * something. So the ring can be small enough to stay in the caches: with
 * stack copies, writing records into ring memory that no cache holds was
 * most of a sample's cost. woken_at holds the consumer position + 1 at each
 * level's last wakeup (0: none yet); two CPUs racing may both wake, which
 * is harmless, and so may the two programs, each with its own woken_at.
 */
enum wake_level {
	WAKE_DRAIN,
	WAKE_SPILL,
	WAKE_LEVELS,
};

__u64 woken_at[WAKE_LEVELS];

/* The ring's size in bytes, set by the loader as it sizes the ring: a
 * query would be one more helper call per record. */
volatile const __u64 ring_size;

/* The wakeup flag for a record of size bytes about to go into ring. */
static __always_inline __u64 wakeup(void *ring, __u64 size)
{
	__u64 avail = bpf_ringbuf_query(ring, BPF_RB_AVAIL_DATA) + size;
	__u64 at;
	int level;

	if (avail >= ring_size / 2)
		level = WAKE_SPILL;
	else if (avail >= ring_size / 4)
		level = WAKE_DRAIN;
	else
		return BPF_RB_NO_WAKEUP;
	/* Asked only here: each query is a helper call. */
	at = bpf_ringbuf_query(ring, BPF_RB_CONS_POS) + 1;
	if (woken_at[level] == at)
		return BPF_RB_NO_WAKEUP;
	woken_at[level] = at;
	return BPF_RB_FORCE_WAKEUP;
}

/* Puts the first size bytes of rec, at most max (its buffer's size, which
 * the verifier needs to see), into ring with the wakeup flags wake
 * (wakeup's, as a rule). Nonzero when the ring was full. */
static __always_inline long send_record(void *ring, void *rec, __u64 size, __u64 max, __u64 wake)
{
	if (size > max)
		size = max;
	return bpf_ringbuf_output(ring, rec, size, wake);
}

/* Whether a cgroup v2 ancestor of cg (its parent, its parent's parent...)
 * has the id id: each one's id is its kernfs node's. A cgroup's parent is
 * its self css's parent, whose cgroup embeds it at the same offset. */
static __always_inline bool cgroup_ancestor(struct cgroup *cg, __u64 id)
{
	for (int level = 0; level < MAX_CGROUP_LEVELS && cg; level++) {
		struct cgroup_subsys_state *parent = BPF_CORE_READ(cg, self.parent);

		if (!parent)
			return false;
		cg = (struct cgroup *)((void *)parent - bpf_core_field_offset(struct cgroup, self));
		if (BPF_CORE_READ(cg, kn, id) == id)
			return true;
	}
	return false;
}

#endif /* SPROF_SAMPLE_H */
