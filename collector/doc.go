// Package collector turns the BPF sampler's raw stack samples into a
// stacks.Profile: it knows which program every process runs, counts
// identical stacks, and at the end resolves and symbolizes each distinct
// address once.
//
// # Why a side band
//
// A sample is an address; only the process's mappings at that moment say
// which file and offset it stands for. Reading /proc/PID/maps when the
// sample is drained — every 250 ms — fails for the processes that matter
// most in a build or a shell pipeline: they have exited, or a reused pid
// now runs something else. So the collector keeps its process table from
// perf "tracking" events (package perfring), the way `perf record` does:
// the kernel reports every executable mmap with the file's build ID, every
// exec, fork and exit, with CLOCK_MONOTONIC timestamps. On each drain the
// samples are read first and the side band second, so every record older
// than a sample is in hand; both are sorted by time, and each record is
// applied before the samples that follow it. A process that lived 100 ms
// between two drains is therefore attributed to its binary and build ID.
// One /proc scan at start covers the processes already running, and /proc
// is reread (rate-limited) when a new stack holds an address in no known
// mapping or when the side band is unavailable (no CAP_PERFMON).
//
// Measured on this project's 2-vCPU VM, kernel 6.18: the side band costs
// 7.8 records per fork+exec+exit of /bin/true; draining and decoding a
// record takes 18 ns warm (perfring.BenchmarkDrain) and about 0.9 µs on a
// cold ring (perfring.BenchmarkTrackerExec). An eBPF exec/exit tracer
// would need its own programs and still read /proc for the mappings, which
// are gone by then; the tracking event hands over the mappings themselves.
//
// # Never mixing two programs
//
// The mappings of a process live in a mapSet. A stack is aggregated under
// the mapSet current at its sample's time, and a mapSet that stacks refer
// to is frozen: an exec, a later mmap or a /proc refresh makes a new one.
// A pid that is reused, or execs, can therefore never lend one program's
// mappings to another's samples.
//
// # Exits
//
// The kernel writes a process's exit record before the dying task unmaps
// its memory and closes its files: on kernel 6.18, samples in exit_mmap and
// __fput, with the user registers of _exit, arrive up to hundreds of µs
// after it. So an exit only marks the process's image; it serves the pid's
// samples until a fork record announces a new process with that pid, or
// for 10 s after its last sample. Nor does an empty /proc/PID/maps — what
// a process in exit or a zombie shows — ever replace known mappings.
//
// # The vDSO
//
// The vDSO is no file, but every native process maps the same image as
// sprof itself. sprof copies its own into a memory file at start and
// symbolizes [vdso] frames of processes above 4 GiB with it, under the
// image's build ID; 32-bit processes map another image and stay unnamed.
// Functions the vDSO does not export (the clock read behind
// clock_gettime, for one) are named only if the kernel's vDSO debug file
// is installed under that build ID.
//
// # Containers
//
// Each process's container (stacks.Sample.Container) comes from its
// /proc/PID/cgroup (package container): read with its other /proc files
// when found there, inherited at fork, and read again at the first sample
// after an exec, since runtimes move a process into the container's
// cgroup between fork and exec. That is one read per process, about 40 µs
// on a loaded 2-vCPU VM (container.BenchmarkOfProcess), and none per
// sample: the container rides in the stack key.
//
// # Stacks without frame pointers
//
// The BPF program walks frame pointers, which most C, C++ and Rust code
// on a host does not keep. With Options.StackCopy, a process that maps any
// file not known to keep them (all but Go binaries) is marked through the
// Source's CopyMarker as soon as its mappings are known (those New finds
// running are listed by CopyPids, for the sampler to mark before it
// starts), the sampler copies its user stack above SP into each sample,
// and the collector unwinds the copy in userspace, frame by frame with the
// binary's .sframe, rules synthesized from its .eh_frame, or its frame
// pointers (unwind.go says which walk a sample keeps). Tables are built once per build ID on
// first need, in the background: a sample that needs a table still being
// built is held back and unwound once it is there (unwind_build.go,
// unwind_hold.go), so a huge library never stalls the drain. Tables are
// kept under a memory budget. On the fixtures of
// testdata/unwind (-O2 -fomit-frame-pointer, in a libc qsort callback),
// every sample reaches main, as with perf --call-graph dwarf; 32 frames
// cost about 1.1 µs of CPU and no allocation (BenchmarkUnwind).
// UnwindStats (sprof record --debug-unwind) says per binary which method
// found how many frames and why unwinds stopped.
//
// # JIT code
//
// Runtimes generate code into anonymous memory that no file names: Node,
// the JVM, Python 3.12+ with -X perf. The collector reads the perf map or
// jitdump such a runtime writes (package symbolize/jit) for each process
// whose samples run code in no mapped file, from the first such sample on,
// or from the first sight of its jitdump mapping, and rereads it after
// every drain while the process lives, keeping the files open so their
// tail is read after it exits. Those addresses are named on a per-process
// [jit pid N] mapping (stacks.JIT); a Sink that is a JITSink is told each
// symbol its samples use, once, so a recording names them on any host.
//
// # Aggregation
//
// Identical samples — same thread, name, mappings, user and kernel stacks,
// truncation — become one count. A repeated stack costs a hash of its
// words, one map lookup and one comparison, with no allocation: about
// 200 ns of CPU per sample with 64-frame stacks (BenchmarkAggregate).
// Stats.NsPerSample reports the same measure for a real recording, thread
// CPU time rather than wall time so that a loaded host does not inflate
// it; it includes the side band and the first sight of every stack, so a
// short system-wide recording at 99 Hz shows several µs per sample while
// costing under 0.2% of one CPU (BenchmarkRecordSystemWide). Addresses are resolved and
// symbolized only when the profile is built, once per distinct location,
// and return addresses are looked up one byte earlier, inside their call.
package collector
