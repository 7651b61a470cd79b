package bpf

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func monotonicNow(t testing.TB) uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Fatal(err)
	}
	return uint64(ts.Nano())
}

// A busy child process is sampled with its identity, registers, stacks and
// times, and the program's run-time statistics count the runs.
func TestSamplesBusyChild(t *testing.T) {
	requireFixture(t)
	cmd, _ := startFixture(t, "chain")
	before := monotonicNow(t)
	s := openSampler(t, Config{Frequency: 499, Pids: []uint32{uint32(cmd.Process.Pid)}, User: true, Kernel: true})
	got := collect(t, s, time.Second, ofPid(cmd.Process.Pid))
	after := monotonicNow(t)

	// The child is busy for the whole second; even on a loaded host it gets
	// a good share of a CPU.
	if len(got) < 20 {
		t.Fatalf("%d samples of a busy child in 1 s at 499 Hz, want ≥ 20", len(got))
	}
	for _, x := range got {
		if x.Tid != x.Pid || !bytes.HasPrefix(x.Comm[:], []byte("fpwalk\x00")) {
			t.Fatalf("sample pid %d tid %d comm %q, want the fixture's", x.Pid, x.Tid, x.Comm)
		}
		if x.Time < before || x.Time > after {
			t.Fatalf("sample time %d outside [%d, %d] (CLOCK_MONOTONIC)", x.Time, before, after)
		}
		if int(x.CPU) >= runtime.NumCPU() {
			t.Fatalf("sample CPU %d, host has %d", x.CPU, runtime.NumCPU())
		}
		if len(x.user) == 0 || x.user[0] != x.PC || x.SP == 0 || x.FP == 0 {
			t.Fatalf("user registers pc %#x sp %#x fp %#x, stack %s", x.PC, x.SP, x.FP, hexFrames(x.user))
		}
	}
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.RunCount < uint64(len(got)) || st.RunTimeNs == 0 {
		t.Fatalf("Stats() = %+v after %d samples", st, len(got))
	}
	t.Logf("%d samples; BPF %d runs, %.0f ns/run", len(got), st.RunCount, float64(st.RunTimeNs)/float64(st.RunCount))
}

// The walk gives exactly the fixture's return addresses, read from its
// code: c is frameless (GCC keeps no frame in leaves that need no stack), so
// its caller b comes from the leaf rule, the rest from frame records.
func TestWalkChain(t *testing.T) {
	requireFixture(t)
	fx := loadFixtureELF(t)
	want := []uint64{
		fx.returnAfterCall(t, "b", "c"),
		fx.returnAfterCall(t, "a", "b"),
		fx.returnAfterCall(t, "main", "a"),
	}
	cmd, _ := startFixture(t, "chain")
	s := openSampler(t, Config{Frequency: 499, Pids: []uint32{uint32(cmd.Process.Pid)}, User: true})
	got := collect(t, s, time.Second, fx.inFixture(cmd.Process.Pid))
	exact := 0
	for _, x := range got {
		if !fx.contains("c", x.PC) {
			t.Fatalf("sample at pc %#x outside c (%#x)", x.PC, fx.syms["c"].Value)
		}
		if len(x.user) >= 4 && equal(x.user[1:4], want) {
			exact++
		} else {
			t.Errorf("stack %s, want [pc %s ...]", hexFrames(x.user), hexFrames(want))
		}
	}
	if len(got) == 0 || exact < len(got) {
		t.Fatalf("%d of %d samples have the exact chain", exact, len(got))
	}
}

// Samples in a prologue or epilogue (push %rbp, mov %rsp,%rbp, pop %rbp,
// ret) keep the leaf's caller.
func TestWalkPrologueEpilogue(t *testing.T) {
	requireFixture(t)
	fx := loadFixtureELF(t)
	inLoop := fx.returnAfterCall(t, "leafloop", "leaf")
	inMain := fx.returnAfterCall(t, "main", "leafloop")
	cmd, _ := startFixture(t, "prologue")
	s := openSampler(t, Config{Frequency: 499, Pids: []uint32{uint32(cmd.Process.Pid)}, User: true})
	got := collect(t, s, 2*time.Second, fx.inFixture(cmd.Process.Pid))
	pcs := map[uint64]int{}
	for _, x := range got {
		var want []uint64
		switch {
		case fx.contains("leaf", x.PC):
			want = []uint64{inLoop, inMain}
			pcs[x.PC]++
		case fx.contains("leafloop", x.PC):
			want = []uint64{inMain}
		default:
			t.Fatalf("sample at pc %#x outside leaf and leafloop", x.PC)
		}
		if len(x.user) < 1+len(want) || !equal(x.user[1:1+len(want)], want) {
			t.Errorf("pc %#x: stack %s, want [pc %s ...]", x.PC, hexFrames(x.user), hexFrames(want))
		}
	}
	if len(pcs) < 3 {
		t.Fatalf("samples hit only %d of leaf's 4 instructions; the test needs most of them", len(pcs))
	}
}

// Frame records that fail a check end the walk, flagged, with no frame
// invented after them.
func TestWalkBadFrames(t *testing.T) {
	requireFixture(t)
	fx := loadFixtureELF(t)
	for _, tc := range []struct {
		mode, fn string
		want     []uint64 // after pc
	}{
		{"below-sp", "spin_below_sp", []uint64{fx.returnAfterCall(t, "main", "spin_below_sp")}},
		{"misaligned", "spin_misaligned", []uint64{fx.returnAfterCall(t, "main", "spin_misaligned")}},
		{"self-loop", "spin_self_loop", []uint64{0x401234}},
		{"bad-return", "spin_bad_return", nil},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			cmd, _ := startFixture(t, tc.mode)
			s := openSampler(t, Config{Frequency: 499, Pids: []uint32{uint32(cmd.Process.Pid)}, User: true})
			got := collect(t, s, 500*time.Millisecond, fx.inFixture(cmd.Process.Pid))
			if len(got) == 0 {
				t.Fatal("no samples")
			}
			for _, x := range got {
				if !fx.contains(tc.fn, x.PC) || !equal(x.user[1:], tc.want) || !x.UserTruncated {
					t.Fatalf("pc %#x stack %s truncated %v, want pc in %s, [pc %s] truncated",
						x.PC, hexFrames(x.user), x.UserTruncated, tc.fn, hexFrames(tc.want))
				}
			}
		})
	}
}

// A stack deeper than 1024 frames gives 1024 frames, flagged truncated.
func TestWalkDepthLimit(t *testing.T) {
	requireFixture(t)
	fx := loadFixtureELF(t)
	inRecurse := fx.returnAfterCall(t, "recurse", "recurse")
	cmd, _ := startFixture(t, "deep", "1500")
	s := openSampler(t, Config{Frequency: 199, Pids: []uint32{uint32(cmd.Process.Pid)}, User: true})
	got := collect(t, s, 500*time.Millisecond, fx.inFixture(cmd.Process.Pid))
	if len(got) == 0 {
		t.Fatal("no samples")
	}
	for _, x := range got {
		if len(x.user) != 1024 || !x.UserTruncated {
			t.Fatalf("%d frames, truncated %v; want 1024, truncated", len(x.user), x.UserTruncated)
		}
		for i, a := range x.user[2:] {
			if a != inRecurse {
				t.Fatalf("frame %d = %#x, want %#x in recurse", i+2, a, inRecurse)
			}
		}
	}
}

// With Pids set, other processes' samples never reach the ring buffer: a
// second, unfiltered sampler sees the other busy process meanwhile.
func TestPidFilterInKernel(t *testing.T) {
	requireFixture(t)
	want, _ := startFixture(t, "chain")
	other, _ := startFixture(t, "chain")
	filtered := openSampler(t, Config{Frequency: 499, Pids: []uint32{uint32(want.Process.Pid)}, User: true, Kernel: true})
	all := openSampler(t, Config{Frequency: 499, User: true, Kernel: true})
	byPid := map[uint32]int{}
	collect(t, filtered, time.Second, func(x *Sample) bool { byPid[x.Pid]++; return false })
	otherInAll := len(collect(t, all, 0, ofPid(other.Process.Pid)))
	if byPid[uint32(want.Process.Pid)] == 0 || len(byPid) != 1 {
		t.Fatalf("filtered sampler: samples by pid %v, want only pid %d", byPid, want.Process.Pid)
	}
	if otherInAll == 0 {
		t.Fatalf("unfiltered sampler saw no sample of pid %d; the test proves nothing", other.Process.Pid)
	}
	if err := all.AddPid(1); !errors.Is(err, ErrNoPidFilter) {
		t.Fatalf("AddPid on an unfiltered sampler: %v, want ErrNoPidFilter", err)
	}
}

// Processes forked by a followed process are followed; the exit hook drops
// them from the set again.
func TestFollowForks(t *testing.T) {
	requireFixture(t)
	parent, stdin := startFixture(t, "fork")
	ppid := uint32(parent.Process.Pid)
	s := openSampler(t, Config{Frequency: 499, Pids: []uint32{ppid}, FollowForks: true, User: true})
	if _, err := stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	got := collect(t, s, time.Second, func(x *Sample) bool { return x.Pid != ppid })
	if len(got) == 0 {
		t.Fatal("no samples of the forked child")
	}
	child := got[0].Pid
	for _, x := range got {
		if x.Pid != child {
			t.Fatalf("samples of pids %d and %d; only the child %d was forked", child, x.Pid, child)
		}
	}
	killForgotten(t, s.objs.Pids, child)
}

// A ring too small for the rate loses samples, counts them, and what it
// kept still decodes.
func TestLostSamples(t *testing.T) {
	requireFixture(t)
	cmd, _ := startFixture(t, "deep", "100") // records of ~900 bytes: four fill the ring
	s := openSampler(t, Config{Frequency: 999, Pids: []uint32{uint32(cmd.Process.Pid)}, User: true, Kernel: true,
		RingBufferSize: os.Getpagesize(), Backlog: -1})
	lost := waitLost(t, s)
	n, err := s.Read(func(x *Sample) {
		if len(x.User) < 100 {
			t.Errorf("a kept sample has %d user frames, want the fixture's 100+", len(x.User))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if lost == 0 || n == 0 {
		t.Fatalf("read %d, lost %d; want both > 0 with a %d-byte ring", n, lost, os.Getpagesize())
	}
	t.Logf("read %d, lost %d", n, lost)
}

func TestOpenRefusesBadConfig(t *testing.T) {
	b, err := os.ReadFile(maxSampleRateSys)
	if err != nil {
		t.Skip(err)
	}
	var limit int
	if _, err := fmt.Sscan(string(b), &limit); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		is   error
	}{
		{"zero frequency", Config{User: true}, ErrFrequency},
		{"above the kernel limit", Config{Frequency: limit + 1, User: true}, ErrFrequency},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(tc.cfg)
			if !errors.Is(err, tc.is) {
				t.Fatalf("Open: %v, want %v", err, tc.is)
			}
			t.Log(err)
		})
	}
	for _, cfg := range []Config{
		{Frequency: 99},
		{Frequency: 99, User: true, FollowForks: true},
		{Frequency: 99, User: true, StackCopy: -1},
		{Frequency: 99, User: true, StackCopy: MaxStackCopy + 1},
		{Frequency: 99, Kernel: true, StackCopy: 4096},
		{Frequency: 99, User: true, CopyAll: true},
	} {
		if _, err := Open(cfg); err == nil {
			t.Fatalf("Open(%+v) succeeded", cfg)
		}
	}
	for _, n := range []int{1000, 3 << 12, maxRingSize * 2} {
		if _, err := ringBufferSize(Config{Frequency: 99, RingBufferSize: n}, 2); err == nil {
			t.Errorf("ring buffer size %d accepted", n)
		}
	}
}

func equal(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// kernelSymbol returns the address range of a kernel function from
// /proc/kallsyms (root sees real addresses).
func kernelSymbol(t *testing.T, name string) (start, end uint64) {
	t.Helper()
	b, err := os.ReadFile("/proc/kallsyms")
	if err != nil {
		t.Fatal(err)
	}
	var addrs []uint64
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		a, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil {
			continue
		}
		addrs = append(addrs, a)
		if f[2] == name && start == 0 {
			start = a
		}
	}
	if start == 0 {
		t.Fatalf("%s not in /proc/kallsyms", name)
	}
	end = ^uint64(0)
	for _, a := range addrs {
		if a > start && a < end {
			end = a
		}
	}
	return start, end
}

// A syscall-heavy process gets kernel stacks through the syscall entry, and
// its user stack keeps the caller of the frameless libc wrapper, found
// through the PLT, in every sample.
func TestKernelStacksAndPLTLeaf(t *testing.T) {
	requireFixture(t)
	fx := loadFixtureELF(t)
	loop := fx.calls(t, "sys_loop")
	if len(loop) != 1 {
		t.Fatalf("sys_loop has %d calls, want 1 (getppid@plt)", len(loop))
	}
	want := []uint64{loop[0].ret, fx.returnAfterCall(t, "main", "sys_loop")}
	sysStart, sysEnd := kernelSymbol(t, "do_syscall_64")
	cmd, _ := startFixture(t, "syscalls")
	time.Sleep(200 * time.Millisecond) // past ld.so
	s := openSampler(t, Config{Frequency: 499, Pids: []uint32{uint32(cmd.Process.Pid)}, User: true, Kernel: true})
	got := collect(t, s, time.Second, ofPid(cmd.Process.Pid))
	var inKernel, viaEntry, exact int
	for _, x := range got {
		if fx.contains("sys_loop", x.PC) {
			exact++ // the frame-record case, covered by TestWalkChain
			continue
		}
		if len(x.user) >= 3 && equal(x.user[1:3], want) {
			exact++
		} else {
			t.Errorf("pc %#x: stack %s, want [pc %s ...]", x.PC, hexFrames(x.user), hexFrames(want))
		}
		if len(x.kernel) == 0 {
			continue
		}
		inKernel++
		for _, a := range x.kernel {
			if a < 0xffff800000000000 {
				t.Fatalf("kernel frame %#x is a user address", a)
			}
			if a >= sysStart && a < sysEnd {
				viaEntry++
				break
			}
		}
	}
	if inKernel == 0 || viaEntry*10 < inKernel*9 {
		t.Fatalf("%d samples in the kernel, %d through do_syscall_64; want some, ≥ 90%% of them", inKernel, viaEntry)
	}
	t.Logf("%d samples, %d in the kernel (%d through do_syscall_64), %d with the exact user chain", len(got), inKernel, viaEntry, exact)
}
