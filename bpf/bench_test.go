package bpf

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"
	"unsafe"
)

// BenchmarkBPFRun measures the sampling program's own cost per run from the
// kernel's BPF run-time statistics (BPF_ENABLE_STATS), sampling every
// process while two fixture processes keep both CPUs busy. Each iteration
// is one 10 ms drain interval.
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
			count := func(x *Sample) { samples++; frames += len(x.User) + len(x.Kernel) }
			for b.Loop() {
				time.Sleep(10 * time.Millisecond)
				if _, err := s.Read(count); err != nil {
					b.Fatal(err)
				}
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
