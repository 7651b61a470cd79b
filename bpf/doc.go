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
// records into a backlog in user memory), and, at most every 10 ms on the
// host, at the first two samples after a sampled process execs (a BTF
// tracepoint on sched_process_exec notes it; the second finds the
// libraries its loader mapped since), at a sample of a process user space
// has not described to the table walk yet (see below), and at a sample
// whose innermost Python frame runs a code object user space has not named
// ([Sampler.PythonNamed]): what user space marks of a process is of its
// program, and a new program goes unmarked until user space drains, and
// user space names code objects by reading them from the process, which
// may exit before the next drain. Never per sample; [Sampler.Read] drains
// backlog and ring when the caller chooses. Nothing is aggregated in
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
// samples and a cgo program in ~90%. Go's runtime.morestack, which grows a
// goroutine's stack, leaves no such link: it saves the goroutine's context
// in g.sched, switches to g0 and clears the frame pointer before calling
// newstack, so the walk ends at morestack. In processes user space names
// ([Sampler.SetGo], with what unwind/goruntime reads from the executable:
// morestack's range from .gopclntab, g's thread-local slot, the offsets of
// g, m and gobuf fields from the binary's DWARF or, without it, a per-version
// table checked against DWARF of binaries the toolchain builds) the walk
// goes on there as Go's traceback does: g0 from thread-local storage
// (amd64: fsbase plus runtime.tlsg's offset) or R28 (arm64), its m, the
// goroutine m.curg, and from curg.sched the function that called
// morestack, its caller and the frame pointers within curg.stack; every
// read checked (g is m.g0, or m.gsignal under a signal handler that
// interrupted newstack; curg.m is m, sched.pc follows a call, sched.sp
// lies in curg.stack), a failed one leaving the stack ending at morestack,
// which user space marks truncated (follow_goroutine in sprof.bpf.c); a
// followed walk says so in [Sample.Goroutine]. A sample taken in morestack
// itself, or on arm64 in runtime.save_g, which morestack calls with g
// already g0 but the frame pointer still the growing function's caller's,
// would walk on from that frame pointer past two missing frames: it is cut
// after morestack and followed the same way. Go in a shared object (its g
// in dynamic TLS) is not followed. The one frame the records cannot give is
// the leaf's caller when the frame-pointer register does not yet (prologue), no longer
// (epilogue) or never (frameless leaf, which GCC emits even with
// -fno-omit-frame-pointer) name the leaf's record; it is taken from the top of
// the stack (x86-64) or the link register (arm64) only when the code around it
// proves it a return address into that leaf (see leaf_return in sprof.bpf.c),
// and the sample says so in [Sample.LeafReturn]; the leaf's own code need not
// be readable (a sample in the page fault of its first instruction's fetch,
// which is how a program's code is first run). A sample taken in execve
// has no user stack at all and is marked truncated: once the new program's
// memory replaces the old one's, the user registers are still the old
// program's.
//
// Kernel stacks come from bpf_get_stack into the same record (up to 128
// frames, further limited by kernel.perf_event_max_stack). Records carry a
// version and a flags word so later versions can append data.
//
// Code built without frame pointers, most of a distribution's libraries,
// cannot be walked this way; its stacks are unwound in user space from SFrame
// or .eh_frame tables, which need the stack's contents. For processes user
// space marks (Sampler.SetCopy: only it knows which mappings lack frame
// pointers) or for all (Config.CopyAll), the record ends with a copy of the
// user stack from sp upward, Config.StackCopy bytes at most and never past the
// stack's end nor where an earlier copy found it unreadable; the registers the
// unwinder starts from are in every record. Copying is the sampler's dominant
// cost (each byte is written to the ring and read out again), so unmarked
// processes never pay it, only the used part of a record enters the ring, and
// with copies the ring is small enough to stay in the CPU caches (see
// [DefaultRingBufferSize]). A read that faults (a page swapped out) falls back
// to shorter prefixes rather than losing the sample.
//
// # Unwinding over tables in the kernel
//
// With [Config.UnwindTables], code without frame pointers is walked in the
// kernel too, at sample time, over the real stack: no copy, no depth
// limit but MAX_USER_FRAMES (1,024). User space converts each binary's
// unwind table (.sframe, else rules synthesized from .eh_frame) with
// [NewUnwindTable] and loads it once ([Sampler.LoadTable]), however many
// processes map the binary; [Sampler.MapTable] then says where a process
// maps it. A converted table encodes ([UnwindTable.MarshalBinary],
// [ParseUnwindTable]) for a store to keep: parsing it back costs a
// fraction of reading the SFrame form and converting it again. Per frame the walk finds the pc's mapping (return address - 1
// below the topmost frame), its table's rule for the pc, the CFA from sp
// or fp, and reads the return address and the saved fp with
// bpf_probe_read_user; code that keeps frame pointers
// ([Sampler.MapFramePointers]) takes the frame-pointer rule below the
// topmost frame. It stops at the outermost frame (a rule saying the
// return address is undefined: _start, clone), and otherwise marks the
// stack truncated ([Sample.UserTables]). A walk that finds no table for
// the topmost frame gives way to the frame-pointer walk and the stack
// copy, which stay the fallback for code whose table is not loaded.
//
// Code with no rule, JIT compilers' ([Sampler.MapJIT]) and code of a
// file its CFI does not describe (V8's builtins in node's text), takes the
// frame-pointer rule where bpf_loop exists (5.17): JIT compilers keep
// frame records (V8 always, HotSpot with -XX:+PreserveFramePointer) right
// below the CFA, the caller's sp. The record is checked as the
// frame-pointer walk checks it (aligned, above sp, on the sample's stack),
// in a file its return address and, below the topmost frame, the pc must
// follow a call (a signal trampoline's pc does not: its frame pointer is
// the interrupted code's), and in the topmost frame leaf_return's evidence
// decides whether the frame pointer names the frame's record yet (on
// arm64 a leaf whose caller is in lr gives way to the frame-pointer walk:
// its caller's sp is not known). A Node.js process's stacks, JIT frames
// between node's C++ and libc, were marked truncated in nearly every
// sample before (the frame-pointer walk ends at libc's start code) and
// paid for a stack copy; with it, whole (TestTableWalkJIT). On the compat
// path (its verifier budget) such code ends the walk as before.
//
// The layout, chosen for the 5.10 verifier and for cost:
//
//   - Rows are 8 bytes (a 32-bit offset from the table's base and a rule
//     index), sorted, in one preallocated array shared by all tables;
//     the few distinct rules (libc: 298 for 28,000 rows; libLLVM: about
//     700 for 1.2 million) in a second array. A gap between functions is
//     a row of its own, so a pc in no function finds no rule.
//   - A page index gives, per 4 KiB of code, the row covering the page's
//     first byte: a lookup searches only that page's rows, at most 4,097,
//     so 13 halvings always end it. The verifier checks a constant bound
//     once per frame; a binary search over a whole table would need 21
//     for libLLVM and a bound no constant can promise. The index costs 4
//     bytes per 4 KiB of code, about 1% of the rows' size.
//   - Mappings are in an LPM trie keyed by big-endian pid and pc, each
//     mapping split into aligned power-of-two prefixes (about 2 per bit of
//     its size): one lookup per frame that leaves the previous frame's
//     mapping, none otherwise (the walk remembers it), and none for a
//     mapping among the last 8 found on the CPU while unwind_epoch, which
//     user space bumps after each change to the trie, stays the same.
//   - A described process ([Sampler.MapProcess]) also has a prefix of its
//     pid alone, which covers no pc: a walk that finds no entry at all for
//     a pid meets a process user space has not described yet, and wakes
//     the reader at once (at most every 10 ms on the host) rather than
//     leave it to the next drain, up to 250 ms of samples that end at
//     their first frame.
//   - The rules found for the last 512 (table, offset) pairs are kept per
//     CPU in a direct-mapped cache, each checked against the table's
//     generation: samples repeat the return addresses of the ones before,
//     and a hit reads one cache line where a lookup reads a dozen or more
//     (page index, rows, rule). An LPM trie is
//     never preallocated, which perf_event programs allow for every map
//     type but hashes. A sorted per-process array would need a bound on
//     mappings per process and a second search.
//   - Each array is preallocated at Open from the budget (7/8 rows, 1/16
//     page index, 1/16 rules): memory known up front, no allocation at
//     sample time. A table takes a contiguous range of each array, first
//     fit; when one does not fit, the table the walk used least recently
//     goes (the walk stamps unwind_table.used about once a second), and a
//     stale mapping finds the slot's generation changed and stops. The
//     default, [DefaultUnwindTables] (32 MiB), holds 3.6 million rows:
//     libLLVM, libclang-cpp, libc, python and a JVM together.
//   - The arrays are created BPF_F_MMAPABLE and a table is written with
//     one copy per array into a mapping of its range, made for the copy:
//     libLLVM's 1.3 million rows in 35-90 ms (BenchmarkLoadTable), where
//     a map update per row took 115-135 ms, and several times that beside
//     a busy compile, while the compile's walks stopped at libLLVM's
//     frames.
//
// No bpf_loop (5.17) on 5.10: sample_compat walks 32 frames in a bounded
// loop and tail-calls table_compat for each further 32, as the
// frame-pointer walk does (see Kernels below); 5.10's 32 tail calls reach
// 1,056 frames. TestTableWalkDeep walks 400 and 1,000 frames of 256 bytes
// on both paths; BenchmarkTableWalk gives the cost per sample and per
// frame. The walk reads the stack through windows, each read serving the
// saved registers of the frames it covers (stack_word says what that
// saved): 1 KiB first, then twice the last, up to the end of a 4 KiB
// page. A frame whose pc is the previous frame's (a recursion) reuses its
// rule.
// Measured on this project's 6.18 host with every option
// (TestEveryPathLoads's first configuration: tables, Python, stack copies,
// filters; the kernel's verified_insns), the verifier checks sample in
// ~61,000 instructions, sample_compat in ~381,000 and table_compat in
// ~234,000 (walk_compat ~125,000), below the 1 million limit of 5.10.
// It checks each inlined copy of a function apart, and the Python walk's
// bounded loop once per turn: each program reaches the frame-pointer walk
// and the end of a run (finish, which walks the Python frames) from one
// place. Before, with up to five copies of each, sample took ~320,000
// here, and on Linux 7.2 for arm64 ~796,000 (now ~123,000) and
// table_compat ~975,000 (now ~190,000).
//
// # Off-CPU records
//
// With [Config.OffCPU], a second program, offcpu.bpf.c, records where
// threads wait: blocked on a lock, in I/O, asleep or preempted. On every
// context switch (the sched_switch BTF tracepoint) it notes when a thread
// the filters select leaves the CPU, and when that thread is about to run
// again after at least [Config.OffCPUMin], it reads the kernel stack the
// thread slept in from the sleeping task (bpf_get_task_stack): the task
// has not run since, so that is its stack as of the switch-out. The record
// ([Sample.OffCPU] set to the time off the CPU) goes into the sampler's
// ring: the two programs are bpf2go objects of their own that share the
// ring and the pid filter map by map replacement at load time, so records
// of both kinds arrive in one stream in time order, and [Sampler.Lost]
// counts the off-CPU records the ring had no room for with the samples.
//
// Where the user stack comes from. BPF can read only the current
// process's memory, and at the switch-in the current task is the one
// leaving, so the user stack must be read in the thread's own context.
// Reading it at every switch-out cost 6 µs per switch on sprof's CI VM
// (the kernel's frame-pointer walk ends in a faulting read wherever code
// lacks frame pointers), most of it for waits too short to report. The
// only hooks in the thread's context right after it runs again are
// kprobes and fentry on finish_task_switch; kprobes are not built into
// every kernel (that CI kernel has none), fentry reaches arm64 only in
// 6.0, and the function is often renamed (finish_task_switch.isra.0) out
// of reach of BTF attachment. But a thread that waits inside a system
// call runs no user code until the call returns, so its record is
// finished on the sys_exit BTF tracepoint with the user stack then, the
// one it left the CPU with, walked only for reported waits. A thread
// switched out again before its call returns (a futex woken and lost to
// another thread) adds that time to the same record. A thread that left
// the CPU outside a system call (preempted, or blocked in a page fault)
// gets its record at once, with its user registers and only pc as its
// user stack, marked truncated. A wait in execve gets its record at once
// with no user stack, marked truncated: the call returns into the new
// program, and inside it a thread can change its id. So does one in exit,
// exit_group or do_exit, which no sys_exit follows (no_sys_exit).
//
// The user stack is the kernel's frame-pointer walk (bpf_get_stack with
// BPF_F_USER_STACK), not the sampler's walk above: that one is built on
// bpf_loop, which Linux 5.10 lacks, and a second copy of it would be
// worse than the differences, which are these. The kernel's walk stops
// at kernel.perf_event_max_stack frames (127 by default;
// [Sample.UserTruncated] is set when the buffer fills), checks only that
// each record is readable, and cannot see the leaf's caller when the leaf
// has no frame record (a libc system call wrapper): off-CPU stacks then
// go from the wrapper to its caller's caller. Code without frame pointers
// ends the walk early; for the processes the sampler copies stacks of
// (Sampler.SetCopy, Config.CopyAll: the same marks), the record
// also carries Config.StackCopy bytes of the stack from sp, taken at the
// sys_exit, for user space to unwind as it does samples. The stack's end
// is not known there (bpf_find_vma is 5.17), so a copy that faults is
// retried shorter, cut at 4 KiB boundaries, and marked.
//
// The switch is the hot path: a host may switch 100,000 times a second,
// nearly all of it for waits far below the minimum. A switch-out writes
// its time into a slot of a table of switch-out times, 2^15 sets of four
// u64 slots chosen by the tid's low bits (time, state and the tid's high
// bits in one word), and a switch-in probes the same cache line: no
// helper call and no clock read. The time is the clock schedule() has
// just read into the CPU's runqueue (sched_clock, reached through the
// task's CFS runqueue): bpf_ktime_get_ns cost about 140 ns a switch on
// sprof's CI VM, half the program's cost. Only differences of it are
// used; records carry bpf_ktime_get_ns, read when one is sent. Whether a
// wait was in a system call is read at the switch-in, from the registers
// the task still holds, for long waits only; only those touch the LRU map
// of records pending a sys_exit. On arm64, whose registers do not tell a
// thread past its call's sys_exit from one inside it, the switch-out also
// notes a thread that left the CPU runnable without being preempted: the
// kernel's way back to user space, whose wait is sent at once. A set
// with more threads off the CPU than ways gives up the longest sleeper's
// slot, counted in [OffCPUStats.Lost]. Kernel threads, exiting threads,
// the idle task and sprof itself are never followed.
//
// The sys_exit hook makes every system call on the host take the
// kernel's traced exit: on sprof's CI VM an empty hook costs a storm of
// short system calls more than the switch program does. So a governor in
// user space turns it off for 15 s whenever the busiest CPU returns from
// more than [Config.OffCPUExitBudget] system calls a second (40,000 by
// default, about 1% of that CPU), and on again to look; meanwhile waits in
// system calls are sent at their switch-in with the user pc alone, marked
// truncated and counted in [OffCPUStats.Cut]. A generation number
// (exit_gen) drops records left pending across an off and on. BPF
// run-time statistics, two clock reads per run of every BPF program on
// the host, are on only with [Config.RunTimeStats].
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
//     bounds a thread's stack by its mapping, from bpf_find_vma. Where the
//     kernel returns through a thunk (x86 mitigations for Retbleed, SRSO
//     and ITS: returnThunks), each call of a walk's callback runs a batch
//     of steps, since there a call costs more than a step.
//   - sample_compat (5.10 to 5.16) walks them in chunks of 32 in a bounded
//     loop, each chunk a tail call of walk_compat, and bounds the stack
//     8 MiB either side of sp; its stack copies end at the stack's top
//     once a copy has found it (the first unreadable page above sp,
//     remembered per thread).
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
// programs load: without tables sample verifies in ~3,600 instructions,
// sample_compat in ~61,000 and walk_compat in ~57,000; both Open in under
// 0.3 s. BenchmarkBPFRun gives the per-run cost
// of each.
//
// The BPF objects for amd64 and arm64 are generated by bpf2go from
// sprof.bpf.c and offcpu.bpf.c and committed, so building sprof needs no clang; `make
// generate` rebuilds them and `make check-generate` fails when the committed
// ones are stale. The program needs root or CAP_BPF plus CAP_PERFMON;
// [ProbeFeatures] says which of the kernel features it uses a host has,
// each probed as the verifier will judge the program, and [CheckHost] what
// stops it from loading.
package bpf
