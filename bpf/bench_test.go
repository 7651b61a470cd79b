package bpf

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/sprof/sprof/internal/cpus"
)

// BenchmarkBPFRun measures the sampling program's own cost per run from the
// kernel's BPF run-time statistics (BPF_ENABLE_STATS), sampling every
// process while two fixture processes keep both CPUs busy. Each iteration
// is one 10 ms drain interval; read-ns/sample is the user-space cost of
// Read per sample (ring copy, decode, callback), syscall included.
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
		b.Run(fmt.Sprintf("%dHz/%v", tc.hz, tc.stack), func(b *testing.B) {
			startFixture(b, tc.stack...)
			startFixture(b, tc.stack...)
			s := openSampler(b, Config{Frequency: tc.hz, User: true, Kernel: true})
			var samples, frames int
			var reading time.Duration
			count := func(x *Sample) { samples++; frames += len(x.User) + len(x.Kernel) }
			for b.Loop() {
				time.Sleep(10 * time.Millisecond)
				start := time.Now()
				if _, err := s.Read(count); err != nil {
					b.Fatal(err)
				}
				reading += time.Since(start)
			}
			st, err := s.Stats()
			if err != nil {
				b.Fatal(err)
			}
			if st.RunCount == 0 || samples == 0 {
				b.Fatalf("no runs (%+v) or samples (%d)", st, samples)
			}
			b.ReportMetric(float64(st.RunTimeNs)/float64(st.RunCount), "bpf-ns/run")
			b.ReportMetric(float64(frames)/float64(samples), "frames/sample")
			b.ReportMetric(float64(samples)/b.Elapsed().Seconds(), "samples/s")
			b.ReportMetric(float64(reading.Nanoseconds())/float64(samples), "read-ns/sample")
		})
	}
}

// BenchmarkBPFRunStackCopy measures what stack copies add to the program's
// cost per sample. Two samplers run side by side on the same CPUs, one
// copying StackCopy bytes (CopyAll), one not, both following two fixture
// processes without frame pointers that keep both CPUs busy with a 33 KiB
// stack (so every copy is full). Both see the same host and the same
// filtered runs of other processes, so the difference of their run time
// per run, scaled to the copying sampler's samples, is the copy's cost per
// sample: copy-ns/sample, steadier than either figure on a shared VM.
// bpf-ns/sample and plain-ns/sample divide each sampler's whole run time,
// filtered runs included, by its samples: upper bounds of the cost per
// sample with and without copies. bytes/sample is the record size in the ring with the copy,
// plain-bytes/sample without.
//
// Most of the copy's cost is writing the record into ring memory that is
// not in any cache: a ring that holds a second of records is written
// round in a second, long after its lines were last touched. ring=0 is the
// default size, ring=262144 a 256 KiB ring that this benchmark's 10 ms
// drains keep warm.
func BenchmarkBPFRunStackCopy(b *testing.B) {
	requireFixture(b)
	for _, hz := range []int{99, 999} {
		for _, size := range []int{8192, 16384} {
			for _, ring := range []int{0, 256 << 10} {
				b.Run(fmt.Sprintf("%dHz/copy=%d/ring=%d", hz, size, ring), func(b *testing.B) {
					benchStackCopy(b, hz, size, ring)
				})
			}
		}
	}
}

func benchStackCopy(b *testing.B, hz, size, ring int) {
	f1, _ := startBinary(b, nofpPath, "deep")
	f2, _ := startBinary(b, nofpPath, "deep")
	pids := []uint32{uint32(f1.Process.Pid), uint32(f2.Process.Pid)}
	plain := openSampler(b, Config{Frequency: hz, Pids: pids, User: true, Kernel: true})
	copying := openSampler(b, Config{Frequency: hz, Pids: pids, User: true, Kernel: true, StackCopy: size, CopyAll: true, RingBufferSize: ring})
	var plainSize, copySize recordSizes
	for b.Loop() {
		time.Sleep(10 * time.Millisecond)
		if _, err := plain.Read(plainSize.add); err != nil {
			b.Fatal(err)
		}
		if _, err := copying.Read(copySize.add); err != nil {
			b.Fatal(err)
		}
	}
	without, with := runStats(b, plain), runStats(b, copying)
	if copySize.samples == 0 || plainSize.samples == 0 || copySize.copied != size*copySize.samples {
		b.Fatalf("%d samples copied %d bytes, want %d each", copySize.samples, copySize.copied, size)
	}
	perRun := float64(with.RunTimeNs)/float64(with.RunCount) - float64(without.RunTimeNs)/float64(without.RunCount)
	b.ReportMetric(perRun*float64(with.RunCount)/float64(copySize.samples), "copy-ns/sample")
	b.ReportMetric(float64(with.RunTimeNs)/float64(copySize.samples), "bpf-ns/sample")
	b.ReportMetric(float64(without.RunTimeNs)/float64(plainSize.samples), "plain-ns/sample")
	b.ReportMetric(copySize.mean(copySize.bytes), "bytes/sample")
	b.ReportMetric(plainSize.mean(plainSize.bytes), "plain-bytes/sample")
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
	if st.RunCount == 0 {
		b.Fatal("the program never ran")
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
	s := openSampler(b, Config{Frequency: hz, User: true, Kernel: true})
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
