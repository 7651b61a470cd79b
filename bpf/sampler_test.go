package bpf

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/sprof/sprof/internal/cpus"
	"github.com/sprof/sprof/internal/testenv"
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
	s := openSampler(t, Config{Frequency: 499, Pids: []uint32{uint32(cmd.Process.Pid)}, User: true, Kernel: true, RunTimeStats: true})
	got := collectCPU(t, s, time.Second, ofPid(cmd.Process.Pid))
	after := monotonicNow(t)

	// The child is busy for 1 s of its CPU time, however long a loaded
	// host takes to give it that: about 500 samples.
	if len(got) < 20 {
		t.Fatalf("%d samples of a busy child in 1 s of its CPU time at 499 Hz, want ≥ 20", len(got))
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

// Stop ends sampling of a busy process: the program runs no more, and
// what it sent before stays readable.
func TestStop(t *testing.T) {
	requireFixture(t)
	cmd, _ := startFixture(t, "chain")
	s := openSampler(t, Config{Frequency: 499, Pids: []uint32{uint32(cmd.Process.Pid)}, User: true, RunTimeStats: true})
	collectN(t, s, 20, ofPid(cmd.Process.Pid))
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // runs that began before Stop end
	before, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // ~100 samples of the child at 499 Hz
	after, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if after.RunCount != before.RunCount || after.Sent != before.Sent {
		t.Fatalf("after Stop: %d runs, %d sent; 200 ms later %d runs, %d sent", before.RunCount, before.Sent, after.RunCount, after.Sent)
	}
	if _, err := s.Read(func(*Sample) {}); err != nil {
		t.Fatalf("Read after Stop: %v", err)
	}
}

// Every online CPU samples at the requested frequency, and a process
// pinned to a CPU is sampled on that CPU. A fixture pinned to each online
// CPU keeps it busy (on this VM an idle virtual CPU's timer may not fire
// at all, for perf either), so each CPU's event fires hz times a second:
// the program runs that often (the kernel's run count), and each CPU sends
// samples (less those of this test process, which the program drops).
func TestEveryOnlineCPUAtFrequency(t *testing.T) {
	requireFixture(t)
	testenv.SkipOnEmulatedCPU(t, "499 Hz on every CPU is not sustained there (62-94% of the runs measured)")
	online, err := cpus.Online()
	if err != nil {
		t.Fatal(err)
	}
	cpuOf := map[uint32]int{}
	for _, cpu := range online {
		cmd, _ := startFixture(t, "chain")
		var set unix.CPUSet
		set.Set(cpu)
		if err := unix.SchedSetaffinity(cmd.Process.Pid, &set); err != nil {
			t.Fatal(err)
		}
		cpuOf[uint32(cmd.Process.Pid)] = cpu
	}
	for _, hz := range []int{99, 499} {
		t.Run(fmt.Sprintf("%d Hz", hz), func(t *testing.T) {
			s := openSampler(t, Config{Frequency: hz, User: true, Kernel: true, RunTimeStats: true})
			// The run counts are read between two clock readings: the
			// runs counted happened in at least the span between the inner
			// readings and at most the span between the outer ones, however
			// long a loaded host keeps this goroutine off the CPU in between.
			outer0 := time.Now()
			st0, err := s.Stats()
			if err != nil {
				t.Fatal(err)
			}
			before, from := sentPerCPU(t, s), time.Now()
			read, pinned := map[uint32]int{}, map[uint32]int{}
			collect(t, s, 2*time.Second, func(x *Sample) bool {
				read[x.CPU]++
				if cpu, ok := cpuOf[x.Pid]; ok {
					if int(x.CPU) != cpu {
						t.Errorf("sample of pid %d on CPU %d; it is pinned to CPU %d", x.Pid, x.CPU, cpu)
					}
					pinned[x.Pid]++
				}
				return false
			})
			inner1 := time.Now()
			st1, err := s.Stats()
			if err != nil {
				t.Fatal(err)
			}
			after, elapsed := sentPerCPU(t, s), time.Since(from)
			outer1 := time.Now()
			perCPU := float64(hz) * elapsed.Seconds()
			for _, cpu := range online {
				sent := after[cpu] - before[cpu]
				t.Logf("CPU %d: %d samples sent, %.0f expected; %d read", cpu, sent, perCPU, read[uint32(cpu)])
				if float64(sent) < perCPU/2 || read[uint32(cpu)] == 0 {
					t.Errorf("CPU %d sent %d samples in %v at %d Hz, %d read; want most of %.0f", cpu, sent, elapsed, hz, read[uint32(cpu)], perCPU)
				}
			}
			for pid, cpu := range cpuOf {
				if pinned[pid] == 0 {
					t.Errorf("no sample of pid %d, pinned to CPU %d", pid, cpu)
				}
			}
			runs := st1.RunCount - st0.RunCount
			rate := float64(hz * len(online))
			least, most := rate*inner1.Sub(from).Seconds(), rate*outer1.Sub(outer0).Seconds()
			t.Logf("%d runs in %v, %.0f to %.0f expected; samples of the pinned fixtures %v", runs, elapsed, least, most, pinned)
			if float64(runs) < 0.95*least || float64(runs) > 1.03*most {
				t.Errorf("%d runs in %v at %d Hz on %d CPUs; want 95%% of %.0f to 103%% of %.0f", runs, elapsed, hz, len(online), least, most)
			}
		})
	}
}

// sentPerCPU reads the program's per-CPU count of samples sent.
func sentPerCPU(t *testing.T, s *Sampler) []uint64 {
	t.Helper()
	var n []uint64
	if err := s.objs.Sent.Lookup(uint32(0), &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// The walk gives exactly the fixture's return addresses, read from its
// code: c is frameless (GCC keeps no frame in leaves that need no stack), so
// its caller b comes from the leaf rule, the rest from frame records. On
// arm64 b lies right above c, within the leaf rule's 8 KiB, where lr alone
// cannot tell a leaf's caller from a framed function's returned call: b's
// frame record tells (leaf_return's case 3). Before, every such sample
// lost b, unflagged.
func TestWalkChain(t *testing.T) {
	requireFixture(t)
	fx := loadFixtureELF(t)
	if runtime.GOARCH == "arm64" {
		if b, c := fx.syms["b"].Value, fx.syms["c"].Value; b < c || b-c >= 8<<10 {
			t.Fatalf("b at %#x, c at %#x: the fixture no longer puts c's caller within 8 KiB above it, the case this test is for", b, c)
		}
	}
	want := []uint64{
		fx.returnAfterCall(t, "b", "c"),
		fx.returnAfterCall(t, "a", "b"),
		fx.returnAfterCall(t, "main", "a"),
	}
	onEveryPath(t, func(t *testing.T, features *Features) {
		cmd, _ := startFixture(t, "chain")
		s := openSampler(t, Config{Frequency: 499, Pids: []uint32{uint32(cmd.Process.Pid)}, User: true, features: features})
		got := collectN(t, s, 50, fx.inFixture(cmd.Process.Pid))
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
	})
}

// A frameless leaf's caller that was itself called through a pointer:
// b_ind calls c directly, and lies right above it, but its frame record
// returns after an indirect call, so on arm64 nothing names b_ind as the
// record's owner and lr cannot be told from a framed function's returned
// call (leaf_return's case 3). The caller must then never be dropped
// silently: every sample without it is flagged truncated. On x86-64 the
// return address on top of the stack gives it, always.
func TestWalkLeafUnderIndirectCall(t *testing.T) {
	requireFixture(t)
	fx := loadFixtureELF(t)
	intoB := fx.returnAfterCall(t, "b_ind", "c")
	onEveryPath(t, func(t *testing.T, features *Features) {
		cmd, _ := startFixture(t, "indirect")
		s := openSampler(t, Config{Frequency: 499, Pids: []uint32{uint32(cmd.Process.Pid)}, User: true, features: features})
		got := collectN(t, s, 20, func(x *Sample) bool { return x.Pid == uint32(cmd.Process.Pid) && fx.contains("c", x.PC) })
		if len(got) < 20 {
			t.Fatalf("%d samples in c, want ≥ 20", len(got))
		}
		for _, x := range got {
			whole := len(x.user) >= 3 && x.user[1] == intoB && fx.contains("a_ind", x.user[2])
			switch {
			case runtime.GOARCH == "arm64" && (whole || !x.UserTruncated || len(x.user) < 2 || !fx.contains("a_ind", x.user[1])):
				t.Fatalf("pc %#x: stack %s truncated %v; want [pc, a return into a_ind ...] flagged truncated: b_ind cannot be told",
					x.PC, hexFrames(x.user), x.UserTruncated)
			case runtime.GOARCH != "arm64" && !whole:
				t.Fatalf("pc %#x: stack %s, want [pc %#x, a return into a_ind ...]", x.PC, hexFrames(x.user), intoB)
			}
		}
	})
}

// Samples in a prologue or epilogue (push %rbp, mov %rsp,%rbp, pop %rbp,
// ret) keep the leaf's caller.
func TestWalkPrologueEpilogue(t *testing.T) {
	requireFixture(t)
	testenv.SkipOnEmulatedCPU(t, "interrupts land only between translated blocks, never on each of leaf's 4 instructions")
	fx := loadFixtureELF(t)
	inLoop := fx.returnAfterCall(t, "leafloop", "leaf")
	inMain := fx.returnAfterCall(t, "main", "leafloop")
	cmd, _ := startFixture(t, "prologue")
	s := openSampler(t, Config{Frequency: 499, Pids: []uint32{uint32(cmd.Process.Pid)}, User: true})
	// 2 s of the fixture's CPU time, about 1,000 samples, however long a
	// loaded host takes to give it that.
	got := collectCPU(t, s, 2*time.Second, fx.inFixture(cmd.Process.Pid))
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
		t.Fatalf("%d samples hit only %d of leaf's 4 instructions; the test needs most of them", len(got), len(pcs))
	}
}

// Frame records that fail a check end the walk, flagged, with no frame
// invented after them.
func TestWalkBadFrames(t *testing.T) {
	requireFixture(t)
	fx := loadFixtureELF(t)
	onEveryPath(t, func(t *testing.T, features *Features) {
		for _, tc := range []struct {
			mode, fn string
			want     []uint64 // after pc and the leaf's return into main
			// On x86-64 the spin moved rsp off its return address, so the
			// walk cannot know main called it; on aarch64 lr still says so.
			hidesCaller bool
		}{
			{"below-sp", "spin_below_sp", nil, false},
			{"misaligned", "spin_misaligned", nil, false},
			{"self-loop", "spin_self_loop", []uint64{0x401234}, true},
			// A readable, well-formed record {0, 0x401234} in the argument
			// strings, above the stack's end: only the upper bound stops it.
			{"above-stack", "spin_above_stack", nil, false},
			{"bad-return", "spin_bad_return", nil, true},
			// A record on another mapping is no stack switch when its return
			// address follows no call.
			{"other-data", "spin_other_data", nil, false},
		} {
			t.Run(tc.mode, func(t *testing.T) {
				if !tc.hidesCaller || runtime.GOARCH == "arm64" {
					tc.want = append([]uint64{fx.returnAfterCall(t, "main", tc.fn)}, tc.want...)
				}
				cmd, _ := startFixture(t, tc.mode, strings.Repeat("r", 32))
				s := openSampler(t, Config{Frequency: 499, Pids: []uint32{uint32(cmd.Process.Pid)}, User: true, features: features})
				got := collectN(t, s, 20, fx.inFixture(cmd.Process.Pid))
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
	})
}

// A frame-pointer chain that crosses to another stack, as Go's vDSO and
// cgo calls do from the g0 stack, is followed there: c runs on a separate
// mapping below the thread's stack, its record links back to
// on_other_stack's record on the thread's stack, and the walk reaches
// main's caller in libc (where, in code without frame pointers, it stops).
func TestWalkOtherStack(t *testing.T) {
	requireFixture(t)
	fx := loadFixtureELF(t)
	want := []uint64{
		fx.returnAfterCall(t, "on_other_stack", "c"),
		fx.returnAfterCall(t, "main", "on_other_stack"),
	}
	onEveryPath(t, func(t *testing.T, features *Features) {
		cmd, _ := startFixture(t, "other-stack")
		s := openSampler(t, Config{Frequency: 499, Pids: []uint32{uint32(cmd.Process.Pid)}, User: true, features: features})
		got := collectN(t, s, 50, fx.inFixture(cmd.Process.Pid))
		for _, x := range got {
			if !fx.contains("c", x.PC) || len(x.user) < 4 || !equal(x.user[1:3], want) {
				t.Fatalf("pc %#x stack %s, want pc in c, [pc %s, main's caller ...]",
					x.PC, hexFrames(x.user), hexFrames(want))
			}
		}
		if len(got) == 0 {
			t.Fatal("no samples")
		}
	})
}

// The walk goes deeper than bpf_get_stack's default 127 frames, reaches
// main from exactly 1024 frames down, and stops at 1024 frames, flagged
// truncated, on a deeper stack. The fixture's stack in c under recurse(n)
// is [pc in c, return into recurse from c, n returns into recurse from
// recurse, return into main, ...].
func TestWalkDepth(t *testing.T) {
	requireFixture(t)
	fx := loadFixtureELF(t)
	fromC := fx.returnAfterCall(t, "recurse", "c")
	inRecurse := fx.returnAfterCall(t, "recurse", "recurse")
	inMain := fx.returnAfterCall(t, "main", "recurse")
	onEveryPath(t, func(t *testing.T, features *Features) {
		for _, depth := range []int{300, 1021, 1500} {
			t.Run(strconv.Itoa(depth), func(t *testing.T) {
				cmd, _ := startFixture(t, "deep", strconv.Itoa(depth))
				s := openSampler(t, Config{Frequency: 199, Pids: []uint32{uint32(cmd.Process.Pid)}, User: true, features: features})
				// Only samples in c: the recursion is complete.
				got := collectN(t, s, 20, func(x *Sample) bool {
					return x.Pid == uint32(cmd.Process.Pid) && fx.contains("c", x.PC)
				})
				if len(got) == 0 {
					t.Fatal("no samples in c")
				}
				for _, x := range got {
					want := 1024 // frames up to the limit
					if main := depth + 2; main < 1024 {
						want = main + 1 // frames up to main's caller's return
						if x.user[main] != inMain {
							t.Fatalf("frame %d = %#x, want %#x in main", main, x.user[main], inMain)
						}
					} else if !x.UserTruncated {
						t.Fatalf("%d frames of a %d-deep stack not flagged truncated", len(x.user), depth+3)
					}
					if len(x.user) < want || len(x.user) > 1024 || x.user[1] != fromC {
						t.Fatalf("%d frames, frame 1 %#x; want %d to 1024, frame 1 %#x", len(x.user), x.user[1], want, fromC)
					}
					for i := 2; i < min(depth+2, 1024); i++ {
						if x.user[i] != inRecurse {
							t.Fatalf("frame %d = %#x, want %#x in recurse", i, x.user[i], inRecurse)
						}
					}
				}
				t.Logf("%d samples, %d frames, truncated %v", len(got), len(got[0].user), got[0].UserTruncated)
			})
		}
	})
}

// Samples carry the thread's name as the kernel shows it in
// /proc/PID/comm, NULs after it, on each kernel path (loads from the task,
// and the helper before 5.17).
func TestSampleComm(t *testing.T) {
	requireFixture(t)
	onEveryPath(t, func(t *testing.T, features *Features) {
		cmd, _ := startFixture(t, "chain")
		pid := cmd.Process.Pid
		// exec names the process after the parent hears it went well:
		// past its start, the fixture has its name, as have its samples.
		waitCPUTime(t, pid, 50*time.Millisecond)
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil {
			t.Fatal(err)
		}
		var want [16]byte
		copy(want[:], strings.TrimSuffix(string(b), "\n"))
		s := openSampler(t, Config{Frequency: 499, Pids: []uint32{uint32(pid)}, User: true, features: features})
		got := collectN(t, s, 20, ofPid(pid))
		if len(got) == 0 {
			t.Fatal("no samples of the fixture")
		}
		for _, x := range got {
			if x.Comm != want {
				t.Fatalf("comm %q, want %q as /proc says", x.Comm, want)
			}
		}
	})
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
	// The filter's 4 MiB are there only with a filter.
	if n, size := all.objs.Pids.MaxEntries(), filtered.objs.Pids.MaxEntries()*filtered.objs.Pids.ValueSize(); n != 1 || size != pidLimit {
		t.Errorf("the pid filter has %d chunks without a filter and %d bytes with one; want 1 and %d", n, size, pidLimit)
	}
	if err := filtered.AddPid(pidLimit); err == nil {
		t.Fatalf("AddPid(%d) succeeded past the kernel's pids", pidLimit)
	}
	// A process added while sampling is sampled from then on.
	if err := filtered.AddPid(uint32(other.Process.Pid)); err != nil {
		t.Fatal(err)
	}
	if len(collectCPU(t, filtered, time.Second, ofPid(other.Process.Pid))) == 0 {
		t.Fatalf("no sample of pid %d after AddPid", other.Process.Pid)
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
	// 1 s of the CPU time of the parent and its children (the sampler's
	// pid filter follows the forks).
	got := collectCPU(t, s, time.Second, func(x *Sample) bool { return x.Pid != ppid })
	if len(got) == 0 {
		t.Fatal("no samples of the forked child")
	}
	child := got[0].Pid
	for _, x := range got {
		if x.Pid != child {
			t.Fatalf("samples of pids %d and %d; only the child %d was forked", child, x.Pid, child)
		}
	}
	killForgotten(t, s.pids.inFilter, child)
}

// A ring too small for the rate loses samples, counts them, and what it
// kept still decodes.
func TestLostSamples(t *testing.T) {
	requireFixture(t)
	cmd, _ := startFixture(t, "deep", "100") // records of ~900 bytes: four fill the ring
	// The ring keeps the first records and loses the later ones: sample
	// only once the fixture spins in its recursion, past ld.so.
	waitCPUTime(t, cmd.Process.Pid, 50*time.Millisecond)
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
	// The losses are counted per CPU, in the map Lost sums.
	var perCPU []uint64
	if err := s.objs.Lost.Lookup(uint32(0), &perCPU); err != nil {
		t.Fatal(err)
	}
	var sum uint64
	for _, v := range perCPU {
		sum += v
	}
	if cpus, err := ebpf.PossibleCPU(); err != nil || len(perCPU) != cpus || sum < lost {
		t.Fatalf("lost map holds %v for %d possible CPUs (%v); Lost() said %d", perCPU, cpus, err, lost)
	}
	t.Logf("read %d, lost %d, lost per CPU %v", n, lost, perCPU)
}

func TestOpenRefusesBadConfig(t *testing.T) {
	b, err := os.ReadFile(maxSampleRateSys)
	if err != nil {
		testenv.Unavailable(t, err.Error())
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
		{Frequency: 99, User: true, Pids: []uint32{0}},
		{Frequency: 99, User: true, Pids: []uint32{1, pidLimit}},
		{Frequency: 99, User: true, StackCopy: -1},
		{Frequency: 99, User: true, StackCopy: MaxStackCopy + 1},
		{Frequency: 99, Kernel: true, StackCopy: 4096},
		{Frequency: 99, User: true, CopyAll: true},
		{Frequency: 99, User: true, CopyPids: []uint32{1}},
	} {
		if _, err := Open(cfg); err == nil {
			t.Fatalf("Open(%+v) succeeded", cfg)
		}
		if err := ProbeLoad(cfg); err == nil {
			t.Fatalf("ProbeLoad(%+v) succeeded", cfg)
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

// kernelNamer returns a function that names a kernel address
// symbol+offset from /proc/kallsyms, for test logs.
func kernelNamer(t *testing.T) func(uint64) string {
	t.Helper()
	b, err := os.ReadFile("/proc/kallsyms")
	if err != nil {
		t.Fatal(err)
	}
	type sym struct {
		addr uint64
		name string
	}
	var syms []sym
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 3 {
			if a, err := strconv.ParseUint(f[0], 16, 64); err == nil && a != 0 {
				syms = append(syms, sym{a, f[2]})
			}
		}
	}
	slices.SortFunc(syms, func(x, y sym) int { return cmp.Compare(x.addr, y.addr) })
	return func(a uint64) string {
		i, _ := slices.BinarySearchFunc(syms, a+1, func(s sym, a uint64) int { return cmp.Compare(s.addr, a) })
		if i == 0 {
			return fmt.Sprintf("%#x", a)
		}
		return fmt.Sprintf("%s+%#x", syms[i-1].name, a-syms[i-1].addr)
	}
}

// kernelSymbols returns the address ranges of the kernel functions whose
// names start with one of prefixes that /proc/kallsyms lists (root sees
// real addresses), and fails t when it lists none.
func kernelSymbols(t *testing.T, prefixes ...string) ranges {
	t.Helper()
	b, err := os.ReadFile("/proc/kallsyms")
	if err != nil {
		t.Fatal(err)
	}
	var addrs []uint64
	var found ranges
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
		if slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(f[2], p) }) {
			found = append(found, [2]uint64{a, ^uint64(0)})
		}
	}
	if len(found) == 0 {
		t.Fatalf("no %v* in /proc/kallsyms", prefixes)
	}
	for i := range found {
		for _, a := range addrs {
			if a > found[i][0] && a < found[i][1] {
				found[i][1] = a
			}
		}
	}
	return found
}

// A syscall-heavy process gets kernel stacks through the syscall entry, and
// its user stack keeps the caller of the frameless libc wrapper, found
// through the PLT, in every sample.
func TestKernelStacksAndPLTLeaf(t *testing.T) {
	requireFixture(t)
	fx := loadFixtureELF(t)
	intoLoop := syscallReturns(t, fx)
	inMain := fx.returnAfterCall(t, "main", "sys_loop")
	entry := kernelSymbols(t, syscallEntries()...)
	irq := kernelSymbols(t, interruptEntries()...)
	cmd, _ := startFixture(t, "syscalls")
	waitCPUTime(t, cmd.Process.Pid, 50*time.Millisecond) // past ld.so
	onEveryPath(t, func(t *testing.T, features *Features) {
		s := openSampler(t, Config{Frequency: 499, Pids: []uint32{uint32(cmd.Process.Pid)}, User: true, Kernel: true, features: features})
		got := collectCPU(t, s, time.Second, ofPid(cmd.Process.Pid))
		code, stack := userMappings(t, cmd.Process.Pid)
		var inKernel, viaEntry, viaIRQ, exact int
		var other [][]uint64 // kernel stacks not through the entry, for the log
		for _, x := range got {
			// In the kernel too, the registers are the thread's user ones,
			// from its pt_regs: pc in the fixture's or libc's code, sp on
			// its stack.
			if !code.contains(x.PC) || !stack.contains(x.SP) || x.FP == 0 {
				t.Fatalf("sample with %d kernel frames: pc %#x sp %#x fp %#x; want pc in %v, sp in %v",
					len(x.kernel), x.PC, x.SP, x.FP, code, stack)
			}
			if fx.contains("sys_loop", x.PC) {
				exact++ // the frame-record case, covered by TestWalkChain
				continue
			}
			if len(x.user) >= 3 && intoLoop[x.user[1]] && x.user[2] == inMain {
				exact++
			} else {
				t.Errorf("pc %#x: stack %s, want [pc, a return into sys_loop, %#x ...]", x.PC, hexFrames(x.user), inMain)
			}
			if len(x.kernel) == 0 {
				continue
			}
			inKernel++
			through, interrupted := false, false
			for _, a := range x.kernel {
				if a < 0xffff800000000000 {
					t.Fatalf("kernel frame %#x is a user address", a)
				}
				through = through || entry.contains(a)
				interrupted = interrupted || irq.contains(a)
			}
			switch {
			case through:
				viaEntry++
			case interrupted:
				viaIRQ++
			}
			if !through && len(other) < 5 {
				other = append(other, x.kernel)
			}
		}
		if len(other) > 0 {
			name := kernelNamer(t)
			for _, k := range other {
				var names []string
				for _, a := range k {
					names = append(names, name(a))
				}
				t.Logf("not through the entry: %s", strings.Join(names, " "))
			}
		}
		// Interrupts of the fixture's user code (the timer's, IPIs) and
		// the work done on their way back to it are kernel stacks too,
		// many of them under emulation, but no system call's.
		if inKernel == viaIRQ || viaEntry*10 < (inKernel-viaIRQ)*9 {
			t.Fatalf("%d samples in the kernel, %d of them in interrupts of user code, %d through %v; want some, ≥ 90%% of the others",
				inKernel, viaIRQ, viaEntry, syscallEntries())
		}
		t.Logf("%d samples, %d in the kernel (%d through %v, %d in interrupts of user code), %d with the exact user chain",
			len(got), inKernel, viaEntry, syscallEntries(), viaIRQ, exact)
	})
}

// syscallEntries are the prefixes of the kernel functions a system call
// passes through, as TestRecordKernelFrames in cmd/sprof counts them:
// x86-64's entry code, entry_SYSCALL_64, whose own steps before and after
// do_syscall_64 are sampled too, and do_syscall_64; on arm64 el0_svc, which also does the entry and exit work
// around do_el0_svc, and the handler of all synchronous exceptions from
// user mode that calls it (el0t_64_sync_handler since 5.13, el0_sync and
// el0_sync_handler before), where el0_svc may be inlined.
func syscallEntries() []string {
	if runtime.GOARCH == "arm64" {
		return []string{"el0_svc", "el0t_64_sync", "el0_sync"}
	}
	return []string{"entry_SYSCALL", "do_syscall"}
}

// interruptEntries are the prefixes of the kernel's entries for interrupts
// and exceptions taken in user mode: x86-64's IDT entries (asm_sysvec_*,
// asm_common_interrupt, asm_exc_*); arm64's el0_irq (before 5.13) and
// el0t_64_irq, and the handlers they call.
func interruptEntries() []string {
	if runtime.GOARCH == "arm64" {
		return []string{"el0_irq", "el0t_64_irq", "el0_interrupt"}
	}
	return []string{"asm_sysvec_", "asm_common_interrupt", "asm_exc_"}
}

// syscallReturns is the set of return addresses of sys_loop's calls of
// getppid@plt: one on x86-64; GCC unrolls the loop to two on aarch64.
func syscallReturns(t testing.TB, fx *fixtureELF) map[uint64]bool {
	t.Helper()
	loop := fx.calls(t, "sys_loop")
	rets := map[uint64]bool{}
	for _, c := range loop {
		if c.target != loop[0].target {
			t.Fatalf("sys_loop calls %#x and %#x, want getppid@plt only", loop[0].target, c.target)
		}
		rets[c.ret] = true
	}
	if len(rets) == 0 {
		t.Fatal("sys_loop has no call of getppid@plt")
	}
	return rets
}

// ranges are address ranges [lo, hi).
type ranges [][2]uint64

func (r ranges) contains(a uint64) bool {
	for _, x := range r {
		if a >= x[0] && a < x[1] {
			return true
		}
	}
	return false
}

// userMappings reads a process's executable file mappings and its main
// stack from /proc/PID/maps.
func userMappings(t *testing.T, pid int) (code, stack ranges) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		var lo, hi uint64
		if _, err := fmt.Sscanf(f[0], "%x-%x", &lo, &hi); err != nil || len(f) < 6 {
			continue
		}
		switch {
		case f[5] == "[stack]":
			stack = append(stack, [2]uint64{lo, hi})
		case strings.HasPrefix(f[5], "/") && strings.Contains(f[1], "x"):
			code = append(code, [2]uint64{lo, hi})
		}
	}
	return code, stack
}

// Open loads only the programs its path runs: the verifier's time is most
// of a start's (on a 6.18 host, table_compat alone took 187 ms of the 327
// the three walk programs took to verify), and far more on an emulated
// CPU. sample_compat tail-calls walk_compat, and table_compat only when it
// walks unwind tables; sample calls neither.
func TestOpenLoadsItsPathOnly(t *testing.T) {
	requireBPF(t)
	onEveryPath(t, func(t *testing.T, features *Features) {
		for _, tables := range []int64{0, DefaultUnwindTables} {
			s := openSampler(t, Config{Frequency: 99, User: true, Kernel: true, UnwindTables: tables, features: features})
			compat := !s.features.LoopWalk()
			if loaded := s.objs.WalkCompat != nil; loaded != compat {
				t.Errorf("UnwindTables %d, tail-call path %v: walk_compat loaded %v", tables, compat, loaded)
			}
			if loaded := s.objs.TableCompat != nil; loaded != (compat && tables > 0) {
				t.Errorf("UnwindTables %d, tail-call path %v: table_compat loaded %v", tables, compat, loaded)
			}
		}
	})
}

// verifierHeadroom is the most instructions the verifier may take to check
// one of the sampler's programs in TestEveryPathLoads: half its limit of 1
// million, as the count differs between kernels (7.2 on arm64 checked the
// sampler in 2.5 times what 6.12 did) and a program near the limit on one
// may not load on the next.
const verifierHeadroom = 500_000

// Every kernel path's program loads (ProbeLoad's checks) on this kernel
// and architecture with every option on, and as sprof's commands open it
// by default (the verifier checks what the options leave reachable, and
// its bounds of the same code differ between them), within
// verifierHeadroom where the kernel counts (5.16; the counts are logged),
// and where bpf_loop walks, with its steps batched and not (batched_steps
// in sprof.bpf.c, which returnThunks picks on the host): the kernel matrix
// runs this on each kernel, fixtures or not.
func TestEveryPathLoads(t *testing.T) {
	requireBPF(t)
	configs := []struct {
		name string
		cfg  Config
	}{
		{"every option", Config{Pids: []uint32{1}, FollowForks: true, CgroupID: 1, IncludeIdle: true,
			StackCopy: MaxStackCopy, CopyPids: []uint32{1}}},
		{"host-wide", Config{StackCopy: 16 << 10}},                                                      // agent, record without -p
		{"a command", Config{Pids: []uint32{1}, FollowForks: true, StackCopy: 16 << 10, CopyAll: true}}, // record -- command
	}
	onEveryPath(t, func(t *testing.T, features *Features) {
		for _, c := range configs {
			for _, batched := range batchings(features) {
				name := c.name
				if batched {
					name += ", batched steps"
				}
				cfg := c.cfg
				cfg.Frequency, cfg.User, cfg.Kernel, cfg.UnwindTables, cfg.Python, cfg.features = 99, true, true, DefaultUnwindTables, true, features
				cfg.batchedSteps = &batched
				loadsWithin(t, name, cfg)
			}
		}
	})
}

// loadsWithin loads the sampler for cfg and fails t where the verifier
// took more than verifierHeadroom instructions for one of its programs.
func loadsWithin(t *testing.T, name string, cfg Config) {
	t.Helper()
	s, err := prepare(cfg)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	for _, p := range []*ebpf.Program{s.objs.Sample, s.objs.WalkCompat, s.objs.TableCompat} {
		if p == nil {
			continue
		}
		info, err := p.Info()
		if err != nil {
			t.Fatal(err)
		}
		if n, ok := info.VerifiedInstructions(); ok && n > verifierHeadroom {
			t.Errorf("%s: the verifier checked %s in %d instructions, more than %d", name, info.Name, n, verifierHeadroom)
		} else if ok {
			t.Logf("%s: %s verified in %d instructions", name, info.Name, n)
		}
	}
	s.Close()
}

// A sample taken while the leaf's first instruction is fetched keeps the
// leaf's caller. The fixture drops the leaf's page before each call, so
// the fetch faults, and a sample in that fault (a kernel stack, pc at the
// leaf's entry) finds the leaf's code unreadable: its caller is then told
// by the return address on top of the stack (x86-64, after a call rel32
// into the leaf) or by lr (arm64), as for code it can read. Before, the
// walk went on from the frame pointer, the caller's own record, and
// dropped the caller without a mark.
func TestWalkLeafInCodeFault(t *testing.T) {
	requireFixture(t)
	if size := os.Getpagesize(); size != 4096 {
		t.Skipf("the fixture drops a 4 KiB page holding the leaf alone; this kernel's pages are %d bytes", size)
	}
	fx := loadFixtureELF(t)
	leaf := fx.syms["pageleaf"].Value
	want := []uint64{fx.returnAfterCall(t, "faultloop", "pageleaf"), fx.returnAfterCall(t, "main", "faultloop")}
	onEveryPath(t, func(t *testing.T, features *Features) {
		cmd, _ := startFixture(t, "fault")
		pid := uint32(cmd.Process.Pid)
		s := openSampler(t, Config{Frequency: 499, Pids: []uint32{pid}, User: true, Kernel: true, features: features})
		got := collectN(t, s, 10, func(x *Sample) bool { return x.Pid == pid && x.PC == leaf && len(x.Kernel) > 0 })
		if len(got) < 10 {
			t.Fatalf("%d samples in the fault at pageleaf in 10 s, want ≥ 10", len(got))
		}
		for _, x := range got {
			if len(x.user) < 1+len(want) || !equal(x.user[1:1+len(want)], want) || !x.LeafReturn {
				t.Fatalf("pc %#x: stack %s leaf return %v, want [pc %s ...] from the leaf rule",
					x.PC, hexFrames(x.user), x.LeafReturn, hexFrames(want))
			}
		}
	})
}

// A frameless leaf entered through a stub that only jumps to it keeps its
// caller: the stub is followed from the call's target. Go's runtime calls
// its Go functions from assembly through such stubs (ABI0 wrappers:
// rt0_go calls schedinit, morestack newstack), so a sample there before
// the function's frame record is written kept one frame. The fixture's
// stubs are Go's wrapper in both its x86-64 forms and a bare jmp (arm64:
// a bare b, which Go's wrapper is there), each above the leaf. A leaf
// called directly that starts with a jump into its own body, past the
// code pc is in (loopleaf, shaped as Go compiles a for loop), is no stub:
// its caller is kept too.
func TestWalkLeafThroughJumpStub(t *testing.T) {
	requireFixture(t)
	fx := loadFixtureELF(t)
	stubs := []string{"gowrapper", "gowrapper_pie", "jmpstub", "loopleaf"}
	if runtime.GOARCH == "arm64" {
		stubs = []string{"bstub", "loopleaf"}
	}
	inMain := fx.returnAfterCall(t, "main", "stubloop")
	through := map[uint64]string{}
	for _, stub := range stubs {
		through[fx.returnAfterCall(t, "stubloop", stub)] = stub
	}
	onEveryPath(t, func(t *testing.T, features *Features) {
		cmd, _ := startFixture(t, "stubs")
		pid := uint32(cmd.Process.Pid)
		s := openSampler(t, Config{Frequency: 499, Pids: []uint32{pid}, User: true, features: features})
		got := collectN(t, s, 80, func(x *Sample) bool {
			return x.Pid == pid && (fx.contains("spinleaf", x.PC) || fx.contains("loopleaf", x.PC))
		})
		seen := map[string]int{}
		for _, x := range got {
			if len(x.user) < 3 || through[x.user[1]] == "" || x.user[2] != inMain || !x.LeafReturn {
				t.Fatalf("pc %#x: stack %s leaf return %v, want [pc, a return after a call to one of %v, %#x ...] from the leaf rule",
					x.PC, hexFrames(x.user), x.LeafReturn, stubs, inMain)
			}
			seen[through[x.user[1]]]++
		}
		for _, stub := range stubs {
			if seen[stub] < 5 {
				t.Errorf("%d of %d samples came through %s, want ≥ 5", seen[stub], len(got), stub)
			}
		}
	})
}
