// Package bpf samples what every CPU is running, in the kernel, and hands
// each sample to user space.
//
// A PERF_COUNT_SW_CPU_CLOCK event on every online CPU runs a BPF program at
// the requested frequency. The program drops samples the filters reject
// (pid set, cgroup v2 subtree, idle, sprof itself) before doing any work,
// then records the thread, its user registers, its kernel stack and its user
// stack walked by frame pointers, and sends the record through one BPF ring
// buffer. It wakes user space only when the ring passes a quarter full
// ([Sampler.Ready]) or half full (a Sampler goroutine then moves the
// records into a backlog in user memory), never per sample; [Sampler.Read]
// drains backlog and ring when the caller chooses. Nothing is aggregated in
// the kernel, because stacks rarely repeat within a drain interval and a
// kernel-side table would only cost memory and lose detail.
//
// The user stack is walked in BPF, not by bpf_get_stack, for depth (up to
// 1024 frames instead of kernel.perf_event_max_stack, 127 by default) and
// for honesty: every frame record must lie inside the thread's stack mapping,
// be 8-byte aligned and lie above the previous one; the first that does not
// ends the walk and the sample is marked truncated. Frames after a bad record
// are never guessed. One exception keeps whole stacks where code runs on a
// second stack linked to the first by its frame records (Go's vDSO, cgo and
// systemstack calls on the g0 stack, signal handlers on an alternate stack,
// fibers): a record in another mapping is followed when its return address
// follows a call instruction, at most three times a walk, and records then
// increase again within that stack (switch_stack in sprof.bpf.c). So is a
// record in the same mapping below the sample's sp, once the walk has left
// the first record: Go allocates the g0 stack of a thread it started and
// goroutine stacks from the same heap arena, and runtime.systemstack links
// g0's records back to a goroutine stack that may lie below. Without
// it, a Go program calling time.Now lost its callers in ~45% of those
// samples and a cgo program in ~90%. The one frame the records cannot give is the leaf's
// caller when the frame-pointer register does not yet (prologue), no longer
// (epilogue) or never (frameless leaf, which GCC emits even with
// -fno-omit-frame-pointer) name the leaf's record; it is taken from the top of
// the stack (x86-64) or the link register (arm64) only when the code around it
// proves it a return address into that leaf (see leaf_return in sprof.bpf.c),
// and the sample says so in [Sample.LeafReturn].
//
// Kernel stacks come from bpf_get_stack into the same record (up to 128
// frames, further limited by kernel.perf_event_max_stack). Records carry a
// version and a flags word so later versions can append data.
//
// Code built without frame pointers, most of a distribution's libraries,
// cannot be walked this way; its stacks are unwound in user space from
// SFrame or .eh_frame tables, which need the stack's contents. For processes
// user space marks (Sampler.SetCopy: only it knows which mappings lack frame
// pointers) or for all (Config.CopyAll), the record ends with a copy of the
// user stack from sp upward, Config.StackCopy bytes at most and never past
// the stack's end, the bound the walk uses; the registers the unwinder
// starts from are in every record. Copying is the sampler's dominant cost
// (each byte is written to the ring and read out again), so unmarked
// processes never pay it, only the used part of a record enters the ring,
// and with copies the ring is small enough to stay in the CPU caches (see
// [DefaultRingBufferSize]). A read that faults (a page swapped out) falls back to shorter
// prefixes rather than losing the sample.
//
// # Kernels
//
// The sampler runs on Linux 5.10 and newer with BTF, amd64 and arm64. Open
// probes the optional helpers ([ProbeFeatures]) and picks the best path the
// kernel allows; [Sampler.Limits] says in one sentence what an older kernel
// changes. The object holds two sampling programs built from one body, and
// Open loads one of them:
//
//   - sample (5.17 and newer) walks frame records through bpf_loop and
//     bounds a thread's stack by its mapping, from bpf_find_vma.
//   - sample_compat (5.10 to 5.16) walks them in chunks of 32 in a bounded
//     loop, each chunk a tail call of walk_compat, and bounds the stack
//     8 MiB either side of sp until a stack copy has found the stack's top
//     (the first unreadable page above sp, remembered per thread).
//
// Both programs are needed because a 5.10 verifier rejects an object that
// merely mentions a callback (bpf_loop, bpf_find_vma) even in code it proves
// dead; smaller differences are const volatile flags the loader sets, whose
// dead branches the verifier drops before it checks helper calls. Those are
// bpf_task_pt_regs (5.15; without it a sample taken in the kernel reads the
// user registers at the top of task->stack by CO-RE, checked to be user-mode
// registers, as THREAD_SIZE is not in BTF) and
// bpf_get_current_ancestor_cgroup_id for perf_event programs (without it the
// cgroup filter follows the cgroup's parents by CO-RE). Every version reads
// the current task with bpf_get_current_task and CO-RE, takes the user
// registers of a sample that interrupted user mode from the perf context,
// and remembers stack mappings in an LRU hash by thread id (task storage
// needs 5.11).
//
// Why chunks and not one loop: the verifier explores a bounded loop once
// per iteration and fails with "the sequence of 8193 jumps is too complex"
// long before 1,024 steps of the walk; a chunk of 32 verifies in
// milliseconds. 5.10 allows 32 tail calls per run, so the first chunk and
// 32 more walk 1,056 records, above MAX_USER_FRAMES. Before 6.0 on arm64 a
// program with tail calls may have no BPF-to-BPF calls, so everything on
// that path is inlined. Measured on this project's 6.18 host, where both
// programs load: sample verifies in ~5,000 instructions, sample_compat in
// ~38,000; both Open in under 0.3 s. BenchmarkBPFRun gives the per-run cost
// of each.
//
// The BPF objects for amd64 and arm64 are generated by bpf2go from
// sprof.bpf.c and committed, so building sprof needs no clang; `make
// generate` rebuilds them and `make check-generate` fails when the committed
// ones are stale. The program needs root or CAP_BPF plus CAP_PERFMON;
// [ProbeFeatures] says which of the kernel features it uses a host has,
// each probed as the verifier will judge the program, and [CheckHost] what
// stops it from loading.
package bpf
