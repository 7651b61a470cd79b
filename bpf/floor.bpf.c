//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * What any sampling program pays on a host before work of its own, for
 * BenchmarkFloor: the same cpu-clock events as sprof's sampler run an empty
 * program, the sampler's pid filter alone (pidset.h), the filter and a
 * minimal record's header (time, ids, comm, counted), or all that and the
 * record sent through a ring buffer (its fill asked first, as the sampler
 * does). Each touches more memory that the last sample on the CPU may have
 * left cold: a host where these cost most of a sample, costs sprof's
 * sampler that much before its walk. percpu sends the same record through a
 * ring of the CPU's own instead of the one all CPUs share, whose lock and
 * producer position every CPU's record takes from the CPU that wrote the
 * last: what the sampler would save with a ring per CPU.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "pidset.h"

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

/* One ring per possible CPU (the loader sets max_entries and puts them). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(values, struct {
		__uint(type, BPF_MAP_TYPE_RINGBUF);
		__uint(max_entries, 1 << 18);
	});
} cpu_records SEC(".maps");

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
	return pid_in(id >> 32);
}

SEC("perf_event")
int filter(struct bpf_perf_event_data *ctx)
{
	return want(bpf_get_current_pid_tgid());
}

enum floor_send {
	SEND_NONE,
	SEND_SHARED, /* records */
	SEND_CPU,    /* cpu_records */
};

/* The record of a wanted thread, filled in per-CPU memory and counted;
 * sent through a ring unless send is SEND_NONE. */
static __always_inline int record_of(const enum floor_send send)
{
	__u64 id = bpf_get_current_pid_tgid(), *count;
	struct floor_record *r;
	__u32 zero = 0, cpu;
	void *ring = &records;

	if (!want(id))
		return 0;
	r = bpf_map_lookup_elem(&scratch, &zero);
	if (!r)
		return 0;
	cpu = bpf_get_smp_processor_id();
	r->time = bpf_ktime_get_ns();
	r->pid = id >> 32;
	r->tid = (__u32)id;
	r->cpu = cpu;
	bpf_get_current_comm(r->comm, sizeof(r->comm));
	if (send == SEND_CPU) {
		ring = bpf_map_lookup_elem(&cpu_records, &cpu);
		if (!ring)
			return 0;
	}
	if (send != SEND_NONE &&
	    (bpf_ringbuf_query(ring, BPF_RB_AVAIL_DATA) > bpf_ringbuf_query(ring, BPF_RB_RING_SIZE) / 2 ||
	     bpf_ringbuf_output(ring, r, sizeof(*r), BPF_RB_NO_WAKEUP)))
		return 0;
	count = bpf_map_lookup_elem(&sent, &zero);
	if (count)
		*count += 1;
	return 0;
}

SEC("perf_event")
int header(struct bpf_perf_event_data *ctx)
{
	return record_of(SEND_NONE);
}

SEC("perf_event")
int record(struct bpf_perf_event_data *ctx)
{
	return record_of(SEND_SHARED);
}

SEC("perf_event")
int percpu(struct bpf_perf_event_data *ctx)
{
	return record_of(SEND_CPU);
}
