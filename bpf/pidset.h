/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The pid filter: one byte per process id (a thread group's), 1 when the
 * process is sampled. Every run of a program with a filter asks it first,
 * the runs that reject a process of a busy host as well as the samples.
 * On sprof's CI VM the filter alone cost 167-206 ns a run with a hash map,
 * 87-103 with this one, and an empty program 61-70 (BenchmarkFloor): the
 * lookup is an array load the verifier inlines, where the hash's hashes
 * the key and follows a bucket to an element, each in memory the 2 ms
 * since the CPU's last sample may have left cold.
 *
 * Bytes, not bits: the fork and exit hooks write it on any CPU at once,
 * and a byte store changes nothing beside it, where setting a bit is a
 * read-modify-write of its word that Linux 5.10's BPF cannot do
 * atomically (atomic OR is 5.12), and two exiting threads of one process
 * may both clear it. User space writes through a memory map of the array
 * (BPF_F_MMAPABLE), byte by byte too. It covers every pid the kernel can
 * hand out (PID_MAX_LIMIT on 64-bit kernels, whatever kernel.pid_max says
 * now, as that can be raised later): 4 MiB, which the loader shrinks to
 * one chunk when there is no filter. Shared by sprof.bpf.c, offcpu.bpf.c
 * (by map replacement: the same map) and floor.bpf.c.
 */
#ifndef SPROF_PIDSET_H
#define SPROF_PIDSET_H

#define PID_CHUNK 4096
#define PID_LIMIT (4 << 20) /* PID_MAX_LIMIT */

/* A chunk of a byte per pid, the value of pids and of pid_marks
 * (pidmarks.h): 4 KiB, a page of their memory maps. */
struct pid_chunk {
	__u8 b[PID_CHUNK];
};

/* The map type of pids and pid_marks: pid_chunks user space writes
 * through a memory map (pidset.go). */
struct pid_bytes {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, PID_LIMIT / PID_CHUNK);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct pid_chunk);
};

struct pid_bytes pids SEC(".maps");

/* The byte of the process tgid in map, an array of pid_chunks; NULL past
 * its end. */
static __always_inline __u8 *pid_byte(void *map, __u32 tgid)
{
	__u32 chunk = tgid / PID_CHUNK;
	struct pid_chunk *c = bpf_map_lookup_elem(map, &chunk);

	return c ? &c->b[tgid & (PID_CHUNK - 1)] : NULL;
}

/* Whether the process tgid is in the filter. */
static __always_inline bool pid_in(__u32 tgid)
{
	__u8 *b = pid_byte(&pids, tgid);

	return b && *b;
}

/* Puts the process tgid in the filter (in 1) or takes it out (0). */
static __always_inline void pid_put(__u32 tgid, __u8 in)
{
	__u8 *b = pid_byte(&pids, tgid);

	if (b)
		*b = in;
}

#endif /* SPROF_PIDSET_H */
