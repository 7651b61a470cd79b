package bpf

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
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

// BenchmarkDecode measures user-space cost per record: a 20-frame kernel
// and 30-frame user stack.
func BenchmarkDecode(b *testing.B) {
	raw := makeRecord(20, 30)
	var s Sample
	for b.Loop() {
		if err := s.decode(raw); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/sample")
	b.ReportMetric(float64(len(raw)), "bytes/sample")
}

// makeRecord builds a record as the BPF program writes it, with frame
// addresses 1, 2, ... so their order can be checked.
func makeRecord(kernel, user int) []byte {
	h := sprofSampleHeader{Version: recordVersion, KernelFrames: uint16(kernel), UserFrames: uint16(user),
		Pid: 42, Tid: 43, Cpu: 1, Time: 1e9, Pc: 1 + uint64(kernel), Sp: 0x7ff0, Fp: 0x7ff8, Flags: flagUserTruncated}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&h.Comm[0])), len(h.Comm)), "fixture")
	raw := append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(&h)), headerSize)...)
	for i := range kernel + user {
		raw = binary.NativeEndian.AppendUint64(raw, uint64(i+1))
	}
	return raw
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
	cpus, err := onlineCPUs()
	if err != nil {
		b.Fatal(err)
	}
	for _, cpu := range cpus {
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
