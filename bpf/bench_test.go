package bpf

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/sprof/sprof/internal/cpus"
)

// BenchmarkBPFRun measures the sampling program's own cost per run from the
// kernel's BPF run-time statistics (BPF_ENABLE_STATS), sampling every
// process while two fixture processes keep both CPUs busy, on each kernel
// path (the 5.10 one's tail calls are in the run time of its first program:
// the statistics count a run from entry to exit). Each iteration
// is one drain, at a wakeup of the ring (a quarter full: 2.6 s at 99 Hz
// on sprof's CI VM); read-ns/sample is the user-space cost of Read per sample (ring
// copy, decode, callback), syscall included.
func BenchmarkBPFRun(b *testing.B) {
	requireFixture(b)
	for _, tc := range []struct {
		hz    int
		stack []string // fixture arguments
	}{
		{99, []string{"chain"}},
		{999, []string{"chain"}},
		{9999, []string{"chain"}},
		{999, []string{"deep", "100"}},
		{999, []string{"deep", "1000"}},
	} {
		for _, path := range kernelPaths {
			b.Run(fmt.Sprintf("%s/%dHz/%v", path.name, tc.hz, tc.stack), func(b *testing.B) {
				startFixture(b, tc.stack...)
				startFixture(b, tc.stack...)
				s := openSampler(b, Config{Frequency: tc.hz, User: true, Kernel: true, features: pathFeatures(path.without), RunTimeStats: true})
				var samples, frames int
				count := func(x *Sample) { samples++; frames += len(x.User) + len(x.Kernel) }
				reading := drainLoop(b, s, count)
				if samples == 0 {
					b.Fatal("no samples")
				}
				b.ReportMetric(float64(frames)/float64(samples), "frames/sample")
				b.ReportMetric(float64(samples)/b.Elapsed().Seconds(), "samples/s")
				b.ReportMetric(float64(reading.Nanoseconds())/float64(samples), "read-ns/sample")
			})
		}
	}
}

// drainLoop drains s into count at the ring's wakeups for b's loop,
// reports the program's run time per run (bpf-ns/run) and returns the time
// reading took.
func drainLoop(b *testing.B, s *Sampler, count func(*Sample)) time.Duration {
	b.Helper()
	reading := drainWakeups(b, s, count, b.Loop)
	st, err := s.Stats()
	if err != nil {
		b.Fatal(err)
	}
	if st.RunCount == 0 {
		b.Fatalf("no runs (%+v)", st)
	}
	b.ReportMetric(float64(st.RunTimeNs)/float64(st.RunCount), "bpf-ns/run")
	return reading
}

// drainWakeups reads s into each at every wakeup of its ring (a quarter
// full, or a record that asks for one), as the collector does, while more
// says so, and returns the time reading took.
func drainWakeups(b *testing.B, s *Sampler, each func(*Sample), more func() bool) time.Duration {
	b.Helper()
	var reading time.Duration
	for more() {
		select {
		case <-s.Ready():
		case <-time.After(30 * time.Second):
			b.Fatal("no wakeup from the ring in 30 s")
		}
		start := time.Now()
		if _, err := s.Read(each); err != nil {
			b.Fatal(err)
		}
		reading += time.Since(start)
	}
	return reading
}

// BenchmarkStackCopyCost measures the program's cost per sample on the
// stack-copy path from the kernel's BPF run-time statistics, at 499 Hz on
// every CPU. Two fixture processes without frame pointers keep both CPUs
// busy with a 33 KiB stack, so every copy is full. Each iteration is one
// drain.
//
// drain=ready is the default Sampler: the ring sized by
// DefaultRingBufferSize, read when Ready receives, as the collector does,
// with its 250 ms tick as a backstop. drain=250ms is the layout before
// Ready: a ring of one second of records, read every 250 ms, no backlog.
//
// A second sampler without copies follows the same processes on the same
// CPUs; the difference of the two run times per run, scaled to the copying
// sampler's samples, is copy-ns/sample, steadier than either figure on a
// shared VM. bpf-ns/sample divides the copying sampler's whole run time,
// filtered runs included, by the samples it sent (Stats.Sent): the cost per
// sample, an upper bound; plain-ns/sample is the same without copies. lost
// and spilled are the copying sampler's lost and backlogged records: both
// 0 when the reader keeps up.
func BenchmarkStackCopyCost(b *testing.B) {
	requireFixture(b)
	for _, size := range []int{8192, 16384} {
		for _, drain := range []string{"ready", "250ms"} {
			b.Run(fmt.Sprintf("499Hz/copy=%d/drain=%s", size, drain), func(b *testing.B) {
				benchStackCopy(b, 499, size, drain == "ready")
			})
		}
	}
}

func benchStackCopy(b *testing.B, hz, size int, ready bool) {
	f1, _ := startBinary(b, nofpPath, "deep")
	f2, _ := startBinary(b, nofpPath, "deep")
	pids := []uint32{uint32(f1.Process.Pid), uint32(f2.Process.Pid)}
	cfg := Config{Frequency: hz, Pids: pids, User: true, Kernel: true, StackCopy: size, CopyAll: true, RunTimeStats: true}
	wake := make(<-chan struct{}) // never
	if !ready {
		online, err := cpus.Online()
		if err != nil {
			b.Fatal(err)
		}
		second := uint64(hz * len(online) * (typicalRecordSize + size))
		cfg.RingBufferSize = min(max(1<<bits.Len64(second-1), minRingSize), maxDefaultRingSize)
		cfg.Backlog = -1
	}
	plain := openSampler(b, Config{Frequency: hz, Pids: pids, User: true, Kernel: true, RunTimeStats: true})
	copying := openSampler(b, cfg)
	if ready {
		wake = copying.Ready()
	}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var plainSize, copySize recordSizes
	for b.Loop() {
		select {
		case <-wake:
		case <-tick.C:
		}
		if _, err := copying.Read(copySize.add); err != nil {
			b.Fatal(err)
		}
		if _, err := plain.Read(plainSize.add); err != nil {
			b.Fatal(err)
		}
	}
	without, with := runStats(b, plain), runStats(b, copying)
	if copySize.samples == 0 || plainSize.samples == 0 || copySize.copied != size*copySize.samples {
		b.Fatalf("%d samples copied %d bytes, want %d each", copySize.samples, copySize.copied, size)
	}
	perRun := float64(with.RunTimeNs)/float64(with.RunCount) - float64(without.RunTimeNs)/float64(without.RunCount)
	b.ReportMetric(perRun*float64(with.RunCount)/float64(with.Sent), "copy-ns/sample")
	b.ReportMetric(float64(with.RunTimeNs)/float64(with.Sent), "bpf-ns/sample")
	b.ReportMetric(float64(without.RunTimeNs)/float64(without.Sent), "plain-ns/sample")
	b.ReportMetric(copySize.mean(copySize.bytes), "bytes/sample")
	b.ReportMetric(float64(with.RingSize>>10), "ring-KiB")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "drains/s")
	b.ReportMetric(float64(with.Spilled), "spilled")
	lost, err := copying.Lost()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(lost), "lost")
}

// recordSizes sums the sizes of records as the program wrote them.
type recordSizes struct{ samples, copied, bytes int }

func (r *recordSizes) add(x *Sample) {
	r.samples++
	r.copied += len(x.StackCopy)
	r.bytes += headerSize + 8*(len(x.User)+len(x.Kernel)) + len(x.StackCopy)
}

func (r *recordSizes) mean(n int) float64 { return float64(n) / float64(max(r.samples, 1)) }

// runStats are a sampler's BPF run-time statistics so far.
func runStats(b *testing.B, s *Sampler) Stats {
	st, err := s.Stats()
	if err != nil {
		b.Fatal(err)
	}
	if st.RunCount == 0 || st.Sent == 0 {
		b.Fatalf("the program never ran or sent nothing: %+v", st)
	}
	return st
}

// BenchmarkDecode measures user-space cost per record: a 20-frame kernel
// and 30-frame user stack, without and with a 16 KiB stack copy (which is
// not copied, only sliced).
func BenchmarkDecode(b *testing.B) {
	for _, stack := range [][]byte{nil, make([]byte, 16384)} {
		b.Run(fmt.Sprintf("copy=%d", len(stack)), func(b *testing.B) {
			raw := makeCopyRecord(20, 30, stack)
			var s Sample
			for b.Loop() {
				if err := s.decode(raw); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/sample")
			b.ReportMetric(float64(len(raw)), "bytes/sample")
		})
	}
}

// makeRecord builds a record as the BPF program writes it, with frame
// addresses 1, 2, ... so their order can be checked.
func makeRecord(kernel, user int) []byte { return makeCopyRecord(kernel, user, nil) }

// makeCopyRecord is makeRecord with a stack copy, when stack is not nil.
func makeCopyRecord(kernel, user int, stack []byte) []byte {
	h := sprofSampleHeader{Version: recordVersion, KernelFrames: uint16(kernel), UserFrames: uint16(user),
		Pid: 42, Tid: 43, Cpu: 1, Time: 1e9, Pc: 1 + uint64(kernel), Sp: 0x7ff0, Fp: 0x7ff8, Flags: flagUserTruncated}
	if stack != nil {
		h.Flags |= flagStackCopy | flagStackCopyTruncated
		h.StackBytes = uint32(len(stack))
	}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&h.Comm[0])), len(h.Comm)), "fixture")
	raw := append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(&h)), headerSize)...)
	for i := range kernel + user {
		raw = binary.NativeEndian.AppendUint64(raw, uint64(i+1))
	}
	return append(raw, stack...)
}

// BenchmarkBPFRunVsGetStack runs the sampler and, on the same CPUs at the
// same time, a reference program that only calls bpf_get_stack for the user
// and the kernel stack (64 frames each), as bcc's profile does. Both see the
// same caches and the same host, so their ratio is steadier than either
// figure on a shared VM.
func BenchmarkBPFRunVsGetStack(b *testing.B) {
	requireFixture(b)
	for _, hz := range []int{99, 999} {
		b.Run(fmt.Sprintf("%dHz", hz), func(b *testing.B) { benchVsGetStack(b, hz) })
	}
}

func benchVsGetStack(b *testing.B, hz int) {
	startFixture(b, "chain")
	startFixture(b, "chain")
	ref, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.PerfEvent, License: "GPL", Instructions: asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.Mov.Reg(asm.R1, asm.R6), asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, -512),
		asm.Mov.Imm(asm.R3, 512), asm.Mov.Imm(asm.R4, 256), asm.FnGetStack.Call(), // BPF_F_USER_STACK
		asm.Mov.Reg(asm.R1, asm.R6), asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, -512),
		asm.Mov.Imm(asm.R3, 512), asm.Mov.Imm(asm.R4, 0), asm.FnGetStack.Call(),
		asm.Mov.Imm(asm.R0, 0), asm.Return(),
	}})
	if err != nil {
		b.Fatal(err)
	}
	defer ref.Close()
	s := openSampler(b, Config{Frequency: hz, User: true, Kernel: true, RunTimeStats: true})
	online, err := cpus.Online()
	if err != nil {
		b.Fatal(err)
	}
	for _, cpu := range online {
		c, err := openCPUClock(cpu, hz, false, ref)
		if err != nil {
			b.Fatal(err)
		}
		defer c.close()
		if err := c.enable(); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		time.Sleep(10 * time.Millisecond)
		if _, err := s.Read(func(*Sample) {}); err != nil {
			b.Fatal(err)
		}
	}
	st, err := s.Stats()
	if err != nil {
		b.Fatal(err)
	}
	rs, err := ref.Stats()
	if err != nil {
		b.Fatal(err)
	}
	ours := float64(st.RunTimeNs) / float64(st.RunCount)
	theirs := float64(rs.Runtime.Nanoseconds()) / float64(rs.RunCount)
	b.ReportMetric(ours, "bpf-ns/run")
	b.ReportMetric(theirs, "getstack-ns/run")
	b.ReportMetric(ours/theirs, "ratio")
}
