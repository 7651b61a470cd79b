/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * What user space marked of each process: a byte per process id (a thread
 * group's), the same layout as the pid filter's (pidset.h), of enum
 * pid_mark bits. A sample loads its process's byte where it asked a hash
 * map per mark: whether the process is marked for stack copies, and whether
 * go_procs and python_procs may hold it at all. Most processes of a host
 * are none of these, and a lookup that finds nothing in a hash map was a
 * sample's dearest step after the walk's reads: on sprof's CI VM
 * python_procs' alone took 75-90 ns of a sample (BenchmarkTableWalkPhases,
 * python phase, against Python off), where an array load takes ~10.
 *
 * For go_procs and python_procs a mark is only a hint: a marked process
 * is looked up there, and one that is not found has no such frames, so a
 * mark left behind by a race costs a lookup, no wrong frame. MARK_COPY is
 * the copy mark itself.
 *
 * Writers: user space (Sampler.SetCopy, SetGo, SetPython) through a memory
 * map of the array, reading and writing a pid's byte under a lock; the
 * fork hook, which stores MARK_COPY alone into a child's byte when its
 * parent has it (before the child runs, so before user space can have
 * heard of it); the exit hook, which stores 0 when a process's last thread
 * exits. A hook's store into a byte user space is rewriting meanwhile may
 * be undone: a copy mark lost for a child user space marked within
 * microseconds of its fork, or marks left behind by a process that exited
 * while user space marked it. The hash map these replaced had the second
 * race too. 4 MiB of kernel memory, as the filter with one.
 */
#ifndef SPROF_PIDMARKS_H
#define SPROF_PIDMARKS_H

#include "pidset.h"

enum pid_mark {
	MARK_COPY = 1,   /* samples carry a stack copy (Sampler.SetCopy) */
	MARK_GO = 2,     /* go_procs may hold the process (Sampler.SetGo) */
	MARK_PYTHON = 4, /* python_procs may hold it (Sampler.SetPython) */
};

struct pid_bytes pid_marks SEC(".maps");

/* The marks of the process tgid. */
static __always_inline __u8 marks_of(__u32 tgid)
{
	__u8 *b = pid_byte(&pid_marks, tgid);

	return b ? *b : 0;
}

/* Replaces the marks of the process tgid. */
static __always_inline void marks_put(__u32 tgid, __u8 marks)
{
	__u8 *b = pid_byte(&pid_marks, tgid);

	if (b)
		*b = marks;
}

#endif /* SPROF_PIDMARKS_H */
