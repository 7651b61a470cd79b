//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * What any sampling program pays on a host before work of its own, for
 * BenchmarkFloor: the same cpu-clock events as sprof's sampler run an
 * empty program, the sampler's pid filter alone, the filter and a minimal
 * record's header (time, ids, comm, counted), or all that and the record
 * sent through a ring buffer (its fill asked first, as the sampler does). Each touches more memory that the last sample on the CPU
 * may have left cold: a host where these cost most of a sample, costs
 * sprof's sampler that much before its walk.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct floor_record {
	__u64 time;
	__u32 pid, tid, cpu, pad;
	char comm[16];
	__u64 regs[8];
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} records SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u8);
} wanted SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct floor_record);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} sent SEC(".maps");

SEC("perf_event")
int empty(struct bpf_perf_event_data *ctx)
{
	return 0;
}

static __always_inline bool want(__u64 id)
{
	__u32 tgid = id >> 32;

	return bpf_map_lookup_elem(&wanted, &tgid) != 0;
}

SEC("perf_event")
int filter(struct bpf_perf_event_data *ctx)
{
	return want(bpf_get_current_pid_tgid());
}

/* The record of a wanted thread, filled in per-CPU memory and counted;
 * sent through the ring when send. */
static __always_inline int record_of(const bool send)
{
	__u64 id = bpf_get_current_pid_tgid(), *count;
	struct floor_record *r;
	__u32 zero = 0;

	if (!want(id))
		return 0;
	r = bpf_map_lookup_elem(&scratch, &zero);
	if (!r)
		return 0;
	r->time = bpf_ktime_get_ns();
	r->pid = id >> 32;
	r->tid = (__u32)id;
	r->cpu = bpf_get_smp_processor_id();
	bpf_get_current_comm(r->comm, sizeof(r->comm));
	if (send && (bpf_ringbuf_query(&records, BPF_RB_AVAIL_DATA) > bpf_ringbuf_query(&records, BPF_RB_RING_SIZE) / 2 ||
		     bpf_ringbuf_output(&records, r, sizeof(*r), BPF_RB_NO_WAKEUP)))
		return 0;
	count = bpf_map_lookup_elem(&sent, &zero);
	if (count)
		*count += 1;
	return 0;
}

SEC("perf_event")
int header(struct bpf_perf_event_data *ctx)
{
	return record_of(false);
}

SEC("perf_event")
int record(struct bpf_perf_event_data *ctx)
{
	return record_of(true);
}
