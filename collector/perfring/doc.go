// Package perfring reads side-band records — mmap, exec, fork, exit — from
// perf "tracking" events through their memory-mapped ring buffers.
//
// A sampling profiler must know which binary every sampled address belongs
// to, also for a process that lived 100 ms and was gone before user space
// looked at /proc. Reading /proc/PID/maps when a sample arrives races the
// exit; the kernel, however, can tell us about every executable mapping,
// exec, fork and exit as it happens. A PERF_COUNT_SW_DUMMY event per CPU
// with the mmap2, build_id, comm_exec and task bits set does exactly that,
// without sampling anything: it is what `perf record` uses. Its records
// carry the GNU build ID of each mapped file (kernel ≥ 5.12), so a deleted
// or containerised binary is still identified.
//
// The ring is read without system calls: data_head is loaded with acquire
// semantics, records are copied out of the ring only when they wrap around
// its end, and data_tail is stored once per drain. Nothing wakes the reader:
// the caller drains on a timer, as it does the BPF sample ring, so the Go
// scheduler is not woken per event. Records carry CLOCK_MONOTONIC
// timestamps (the clock of bpf_ktime_get_ns) so they can be merged in time
// order with BPF samples.
//
// The kernel is trusted to write well-formed records, but a corrupt size
// must not hang or crash the reader: every size is checked against the
// bytes available, and Parse bounds-checks every field.
package perfring
