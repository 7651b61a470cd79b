package collector

import (
	"encoding/binary"
	"runtime"
	"slices"
	"testing"

	"github.com/sprof/sprof/internal/elfx"
	"github.com/sprof/sprof/sframe"
	"github.com/sprof/sprof/unwind"
)

// benchStack builds a process with two binaries of nfuncs functions each
// (3 rows a function, like a prologue, body and epilogue) and a stack
// copy of depth frames whose functions alternate between the two
// binaries every other frame, as in a program calling a library that
// calls back; a return address of 0 ends the unwind, as at _start.
func benchStack(b testing.TB, depth int) (*unwinder, *mapSet, stackCopy) {
	const nfuncs, fsize = 3000, 256
	u := newUnwinder(newFiles("/proc"), 0, false, true, nil)
	set := &mapSet{}
	sp := uint64(0x7ffc_0000_0000)
	var stack []byte
	type bin struct {
		start uint64
		info  *unwindInfo
	}
	var bins [2]bin
	for i := range bins {
		funcs := make([]sframe.Function, nfuncs)
		for j := range funcs {
			// Frame sizes from 16 to 136 bytes.
			off := int32(16 + 8*(j%16))
			funcs[j] = sframe.Function{Start: 0x1000 + uint64(j)*fsize, Size: fsize, Rows: []sframe.Row{
				{Start: 0, CFA: sframe.Loc{Kind: sframe.LocReg, Reg: 7, Off: 8}, RA: sframe.Loc{Kind: sframe.LocCFA, Deref: true, Off: -8}, FP: sframe.Loc{Kind: sframe.LocSame}},
				{Start: 8, CFA: sframe.Loc{Kind: sframe.LocReg, Reg: 7, Off: off}, RA: sframe.Loc{Kind: sframe.LocCFA, Deref: true, Off: -8}, FP: sframe.Loc{Kind: sframe.LocSame}},
				{Start: fsize - 8, CFA: sframe.Loc{Kind: sframe.LocReg, Reg: 7, Off: 8}, RA: sframe.Loc{Kind: sframe.LocCFA, Deref: true, Off: -8}, FP: sframe.Loc{Kind: sframe.LocSame}},
			}}
		}
		t, err := sframe.NewTable(sframe.ABIAMD64LE, funcs)
		if err != nil {
			b.Fatal(err)
		}
		start := uint64(0x5555_0000_0000) + uint64(i)<<32
		f := &binaryFile{name: []string{"/bin/app", "/lib/libc.so.6"}[i], buildID: []string{"aa", "bb"}[i]}
		set.insert(mapping{start: start, limit: start + 0x1000 + nfuncs*fsize, offset: 0x1000, bin: f})
		in := u.info(&set.maps[len(set.maps)-1])
		in.classified, in.readable, in.built = true, true, true
		in.table, in.kind = t, unwind.MethodEHFrame
		in.loads = elfx.Segments{{Off: 0x1000, Vaddr: 0x1000, Filesz: nfuncs * fsize, Exec: true}}
		bins[i] = bin{start, in}
	}
	// Frame k runs function k of binary k%2 at its body row.
	pcOf := func(k int) uint64 {
		if k == depth {
			return 0
		}
		return bins[k%2].start + 0x1000 + uint64(k)*fsize + 16
	}
	regs := sframe.Regs{PC: pcOf(0), SP: sp}
	for k := 0; k < depth; k++ {
		size := 16 + 8*(k%16)
		frame := make([]byte, size)
		binary.LittleEndian.PutUint64(frame[size-8:], pcOf(k+1))
		stack = append(stack, frame...)
	}
	u.stack = stack
	return u, set, stackCopy{regs: regs, n: len(stack)}
}

// BenchmarkUnwind measures the userspace cost of a sample with a stack
// copy: unwinding 32 frames over two binaries' tables and counting them.
func BenchmarkUnwind(b *testing.B) {
	const depth = 32
	u, set, c := benchStack(b, depth)
	us, stop := u.unwind(1, set, &c)
	if len(us) != depth || stop != unwind.Outermost {
		b.Fatalf("%d frames, stop %v; want %d, outermost", len(us), stop, depth)
	}
	// CPU time as well as wall time: on a loaded host the wall clock
	// also counts the time the thread waited for a CPU.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	b.ResetTimer()
	began := threadCPU()
	for b.Loop() {
		us, stop := u.unwind(1, set, &c)
		u.account(set, us, stop, nil)
	}
	cpu := float64((threadCPU() - began).Nanoseconds()) / float64(b.N)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/sample")
	b.ReportMetric(cpu, "cpu-ns/sample")
	b.ReportMetric(cpu/depth, "cpu-ns/frame")
}

// loopSource hands out the same samples at every Read, as a sampler
// under a steady load does.
type loopSource struct{ samples []Sample }

func (s *loopSource) Read(fn func(*Sample)) (int, error) {
	for i := range s.samples {
		fn(&s.samples[i])
	}
	return len(s.samples), nil
}

func (*loopSource) Lost() (uint64, error) { return 0, nil }

// BenchmarkDrainCopies measures a whole drain of samples with stack
// copies in the steady state (every table built): copying them out of
// the source, ordering, unwinding 32 frames and aggregating. Its figures
// are per sample.
func BenchmarkDrainCopies(b *testing.B) {
	const depth, perDrain = 32, 256
	u, set, cp := benchStack(b, depth)
	stack := slices.Clone(u.stack[:cp.n])
	c, err := New(Options{Frequency: 99, ProcRoot: b.TempDir(), NoSideband: true, StackCopy: true})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	c.unw = u
	src := &loopSource{}
	for pid := uint32(1); pid <= 4; pid++ {
		c.table.newImage(pid, set)
	}
	for i := range perDrain {
		pid := uint32(1 + i%4)
		src.samples = append(src.samples, Sample{Time: uint64(i + 1), Pid: pid, Tid: pid,
			PC: cp.regs.PC, SP: cp.regs.SP, User: []uint64{cp.regs.PC}, StackCopy: stack})
	}
	if err := c.Drain(src); err != nil {
		b.Fatal(err)
	}
	if st := c.UnwindStats(); st.Userspace != perDrain || st.Frames[unwind.MethodEHFrame] != perDrain*(depth-1) {
		b.Fatalf("first drain: %d userspace unwinds, %d frames; want %d, %d", st.Userspace, st.Frames[unwind.MethodEHFrame], perDrain, perDrain*(depth-1))
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	b.ResetTimer()
	began := threadCPU()
	for b.Loop() {
		if err := c.Drain(src); err != nil {
			b.Fatal(err)
		}
	}
	cpu := float64((threadCPU() - began).Nanoseconds()) / float64(b.N*perDrain)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*perDrain), "ns/sample")
	b.ReportMetric(cpu, "cpu-ns/sample")
}

// BenchmarkDrainHolding measures a drain while a library's table is being
// built: half the samples go through the library and are held back (their
// stack copied out of the drain's arena), the oldest flushed once the
// queue is full; the other half are unwound and aggregated as usual.
func BenchmarkDrainHolding(b *testing.B) {
	const perDrain = 256
	f := newHoldFixture(b, nil, true)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	began := threadCPU()
	t := uint64(1)
	for b.Loop() {
		f.add(t, perDrain)
		t += perDrain
		if err := f.c.Drain(f.src); err != nil {
			b.Fatal(err)
		}
	}
	cpu := float64((threadCPU() - began).Nanoseconds()) / float64(b.N*perDrain)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*perDrain), "ns/sample")
	b.ReportMetric(cpu, "cpu-ns/sample")
	if st := f.c.UnwindStats(); st.Held == 0 {
		b.Fatal("no sample held back")
	}
}
