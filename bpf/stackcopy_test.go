package bpf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The fixture's canaries (testdata/bpf/nofp.c) and its fault mode's layout.
const (
	canaryLow    = 0x5350524f46434c4f
	canaryHigh   = 0x5350524f46434849
	faultSP      = 64
	faultTouched = 12 << 10
)

// startStack is the kernel's mm->start_stack of a process, field 28 of
// /proc/PID/stat: the end of its main thread's stack as the sampler sees it.
func startStack(t testing.TB, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:])) // from field 3, state
	v, err := strconv.ParseUint(f[28-3], 10, 64)
	if err != nil {
		t.Fatalf("/proc/%d/stat startstack: %v", pid, err)
	}
	return v
}

// mappingEnd is the end of the mapping of process pid that holds addr.
func mappingEnd(t testing.TB, pid int, addr uint64) uint64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lo, hi, _ := strings.Cut(strings.Fields(sc.Text())[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 == nil && err2 == nil && start <= addr && addr < end {
			return end
		}
	}
	t.Fatalf("no mapping of pid %d holds %#x", pid, addr)
	return 0
}

// wordsInOrder says whether the 8-byte-aligned words of stack hold want in
// this order, and where the first one is.
func wordsInOrder(stack []byte, want []uint64) (first int, ok bool) {
	first, next := -1, 0
	for off := 0; off+8 <= len(stack) && next < len(want); off += 8 {
		if binary.LittleEndian.Uint64(stack[off:]) == want[next] {
			if next == 0 {
				first = off
			}
			next++
		}
	}
	return first, next == len(want)
}

// residentEnd is where the stack holding sp ends as a copy can read it:
// the first page at or above sp's that /proc/PID/pagemap says is not
// present (unmapped pages are not), or end. A thread stack's top is its
// first page ever written; memory the kernel merged into its mapping above
// it (Linux 6.1 does so with glibc's thread stacks) mostly never was.
func residentEnd(t testing.TB, pid int, sp, end uint64) uint64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/pagemap", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	page := uint64(os.Getpagesize())
	var entry [8]byte
	for addr := sp &^ (page - 1); addr < end; addr += page {
		if _, err := f.ReadAt(entry[:], int64(addr/page*8)); err != nil {
			t.Fatalf("/proc/%d/pagemap at %#x: %v", pid, addr, err)
		}
		if binary.LittleEndian.Uint64(entry[:])&(1<<63) == 0 {
			return addr
		}
	}
	return end
}

// The copy of a stack without frame pointers holds the words an unwinder
// needs: on x86-64 c's return address on top (c is frameless), b's 3 KiB
// frame between its canaries, then the return addresses into a and its
// caller (main, or the thread's start routine); on arm64 c's return
// address is in lr, and the copy starts with the one into a, which b saved
// at the bottom of its frame, then the canaries and the return address
// into a's caller, which a saved. It ends at the stack's end:
// mm->start_stack on the main thread; in a thread, the end of the pthread
// stack's mapping, or below it the end of what was ever written when the
// mapping goes on above the stack (merged: the amd64 6.1 layout, where
// every copy faulted). A smaller StackCopy cuts it, flagged.
func TestStackCopy(t *testing.T) {
	requireFixture(t)
	fx := loadELF(t, nofpPath)
	intoB := fx.returnAfterCall(t, "b", "c")
	onEveryPath(t, func(t *testing.T, features *Features) {
		// Whether the program knows thread stacks' mappings: on a
		// kernel's own path ("probed") only from 5.17 on.
		knowsMappings := features == nil && ProbeFeatures().LoopWalk()
		for _, tc := range []struct {
			mode, root string // root calls a
			size       int
			truncated  bool
		}{
			{"chain", "main", 16384, false},
			{"chain", "main", 256, true},
			{"chain", "main", MaxStackCopy, false}, // the largest scratch record loads
			{"thread", "thread", 16384, false},
			{"merged", "thread", 16384, false},
		} {
			t.Run(fmt.Sprintf("%s/%d", tc.mode, tc.size), func(t *testing.T) {
				chain := []uint64{canaryLow, canaryHigh, fx.returnAfterCall(t, "a", "b"), fx.returnAfterCall(t, tc.root, "a")}
				top, at := intoB, 8 // the copy's first word; where chain starts
				if runtime.GOARCH == "arm64" {
					chain = []uint64{chain[2], chain[0], chain[1], chain[3]}
					top, at = chain[0], 0
				}
				cmd, _ := startBinary(t, nofpPath, tc.mode)
				pid := cmd.Process.Pid
				s := openSampler(t, Config{Frequency: 499, Pids: []uint32{uint32(pid)}, User: true, Kernel: true,
					StackCopy: tc.size, CopyAll: true, features: features})
				got := collectN(t, s, 20, func(x *Sample) bool { return fx.contains("c", x.PC) && x.Pid == uint32(pid) })
				if len(got) < 20 {
					t.Fatalf("%d samples in c, want ≥ 20", len(got))
				}
				for _, x := range got {
					if len(x.stack) < 8 || binary.LittleEndian.Uint64(x.stack) != top {
						t.Fatalf("copy of %d bytes at sp %#x does not start with the return address %#x", len(x.stack), x.SP, top)
					}
					if runtime.GOARCH == "arm64" && x.LR != intoB {
						t.Fatalf("lr %#x, want c's return address %#x", x.LR, intoB)
					}
					truncated, fault, end := tc.truncated, false, startStack(t, pid)
					switch {
					case truncated, x.Tid == x.Pid:
					case knowsMappings:
						// A page never written below a mapping
						// whose last page is resident is a hole
						// (TestStackCopyFault), flagged: so it is
						// where the thread's mapping merged with a
						// mapping above that is resident at its top
						// (the merged case's copies were flagged
						// once in the kernel matrix's arm64 7.2 VM,
						// the mapping's top not checked then).
						top := mappingEnd(t, pid, x.SP)
						end = residentEnd(t, pid, x.SP, top)
						fault = end < top && residentEnd(t, pid, top-8, top) == top
						truncated = fault
					default:
						// Without bpf_find_vma the thread's mapping is
						// not known: the copy goes on into the next
						// if it is readable, and where all of the
						// copy's size is, it is flagged truncated.
						end = residentEnd(t, pid, x.SP, x.SP+uint64(tc.size))
						truncated = end == x.SP+uint64(tc.size)
					}
					if x.StackCopyTruncated != truncated || x.StackCopyFault != fault {
						t.Fatalf("copy of %d bytes: truncated %v fault %v, want truncated %v, fault %v",
							len(x.stack), x.StackCopyTruncated, x.StackCopyFault, truncated, fault)
					}
					if fault {
						if x.SP+uint64(len(x.stack)) != end {
							t.Fatalf("copy [%#x, +%d) faulted, want it to end at the hole %#x", x.SP, len(x.stack), end)
						}
						continue
					}
					if truncated {
						if len(x.stack) != tc.size {
							t.Fatalf("truncated copy of %d bytes, want %d", len(x.stack), tc.size)
						}
						if _, ok := wordsInOrder(x.stack, chain); !ok && !tc.truncated {
							t.Fatalf("copy of %d bytes lacks %s", len(x.stack), hexFrames(chain))
						}
						continue
					}
					if x.SP+uint64(len(x.stack)) != end || len(x.stack) >= tc.size {
						t.Fatalf("copy [%#x, +%d) in tid %d, want it to end at the stack's end %#x (mapping end %#x), short of %d bytes",
							x.SP, len(x.stack), x.Tid, end, mappingEnd(t, pid, x.SP), tc.size)
					}
					if off, ok := wordsInOrder(x.stack, chain); !ok || off != at {
						t.Fatalf("copy of %d bytes lacks %s in order from offset %d", len(x.stack), hexFrames(chain), at)
					}
				}
				t.Logf("%d samples, copies of %d bytes", len(got), len(got[0].stack))
			})
		}
	})
}

// A copy that runs into pages never written (not resident) faults; the
// sampler then finds the first such page above sp. In fault, nothing
// above it was ever written either: the stack ends there, the copy up to
// it is whole (the merged case of TestStackCopy, on the main thread). In
// hole, the mapping's top was written: the stack has a hole, and the copy
// up to it is flagged. Both copies hold the right bytes.
func TestStackCopyFault(t *testing.T) {
	requireFixture(t)
	fx := loadELF(t, nofpPath)
	onEveryPath(t, func(t *testing.T, features *Features) {
		for _, tc := range []struct {
			mode  string
			fault bool
		}{
			{"fault", false},
			{"hole", true},
		} {
			t.Run(tc.mode, func(t *testing.T) {
				cmd, _ := startBinary(t, nofpPath, tc.mode)
				pid := cmd.Process.Pid
				s := openSampler(t, Config{Frequency: 499, Pids: []uint32{uint32(pid)}, User: true, StackCopy: 16384,
					CopyAll: true, features: features})
				got := collectN(t, s, 20, func(x *Sample) bool { return fx.contains("spin_on_stack", x.PC) && x.Pid == uint32(pid) })
				if len(got) < 20 {
					t.Fatalf("%d samples in spin_on_stack, want ≥ 20", len(got))
				}
				for _, x := range got {
					if want := faultTouched - faultSP; len(x.stack) != want || x.StackCopyFault != tc.fault ||
						x.StackCopyTruncated != tc.fault {
						t.Fatalf("copy of %d bytes, fault %v truncated %v; want %d bytes, fault and truncated %v",
							len(x.stack), x.StackCopyFault, x.StackCopyTruncated, want, tc.fault)
					}
					for i, c := range x.stack {
						if c != byte((faultSP+i)*7) {
							t.Fatalf("copy byte %d = %#x, want %#x", i, c, byte((faultSP+i)*7))
						}
					}
				}
			})
		}
	})
}

// Only processes marked with SetCopy get copies, until unmarked; a mark
// goes when its process exits.
func TestSetCopy(t *testing.T) {
	requireFixture(t)
	marked, _ := startBinary(t, nofpPath, "chain")
	other, _ := startBinary(t, nofpPath, "chain")
	mpid, opid := uint32(marked.Process.Pid), uint32(other.Process.Pid)
	s := openSampler(t, Config{Frequency: 499, User: true, StackCopy: 4096})
	if err := s.SetCopy(mpid, true); err != nil {
		t.Fatal(err)
	}
	// Samples taken between Open and the mark have no copy.
	time.Sleep(10 * time.Millisecond)
	if _, err := s.Read(func(*Sample) {}); err != nil {
		t.Fatal(err)
	}
	count := func() (withCopy, without map[uint32]int) {
		withCopy, without = map[uint32]int{}, map[uint32]int{}
		collect(t, s, time.Second, func(x *Sample) bool {
			if x.StackCopy != nil {
				withCopy[x.Pid]++
			} else {
				without[x.Pid]++
			}
			return false
		})
		return withCopy, without
	}
	withCopy, without := count()
	if withCopy[mpid] == 0 || without[mpid] != 0 || without[opid] == 0 || len(withCopy) != 1 {
		t.Fatalf("marked %d: samples with copies by pid %v, without %v; want copies for the marked pid only",
			mpid, withCopy, without)
	}
	if err := s.SetCopy(mpid, false); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // a run that saw the mark has written its record
	if _, err := s.Read(func(*Sample) {}); err != nil {
		t.Fatal(err)
	}
	withCopy, without = count()
	if len(withCopy) != 0 || without[mpid] == 0 {
		t.Fatalf("unmarked: samples with copies by pid %v, without %v; want none with copies", withCopy, without)
	}
	if err := s.SetCopy(mpid, false); err != nil {
		t.Fatalf("unmarking twice: %v", err)
	}

	if err := s.SetCopy(opid, true); err != nil {
		t.Fatal(err)
	}
	killForgotten(t, s.marks.copyMarked, opid)

	plain := openSampler(t, Config{Frequency: 99, User: true})
	if err := plain.SetCopy(mpid, true); !errors.Is(err, ErrNoStackCopy) {
		t.Fatalf("SetCopy on a sampler without StackCopy: %v, want ErrNoStackCopy", err)
	}
}

// A process in Config.CopyPids has copies from its first sample on, with
// no SetCopy; others have none.
func TestCopyPidsFromTheStart(t *testing.T) {
	requireFixture(t)
	marked, _ := startBinary(t, nofpPath, "chain")
	other, _ := startBinary(t, nofpPath, "chain")
	mpid, opid := uint32(marked.Process.Pid), uint32(other.Process.Pid)
	s := openSampler(t, Config{Frequency: 999, Pids: []uint32{mpid, opid}, User: true, StackCopy: 4096, CopyPids: []uint32{mpid}})
	withCopy, without := map[uint32]int{}, map[uint32]int{}
	// Until both have 20 samples, within 10 s of their CPU time: a loaded
	// host may starve one a while.
	collectUntil(t, s, 10*time.Second, func(x *Sample) bool {
		if x.StackCopy != nil {
			withCopy[x.Pid]++
		} else {
			without[x.Pid]++
		}
		return false
	}, func([]sampleCopy) bool {
		return withCopy[mpid]+without[mpid] >= 20 && withCopy[opid]+without[opid] >= 20
	})
	if withCopy[mpid] == 0 || without[mpid] != 0 || without[opid] == 0 || withCopy[opid] != 0 {
		t.Fatalf("CopyPids [%d]: samples with copies by pid %v, without %v; want copies for it only, from the first",
			mpid, withCopy, without)
	}
}

// Records with copies fill a small ring fast: the overflow is counted, and
// what was kept is whole. Without a backlog nothing empties the ring
// until Read, so it overflows however the test is scheduled (the backlog
// would spill it, racing the samples).
func TestStackCopyLost(t *testing.T) {
	requireFixture(t)
	cmd, _ := startBinary(t, nofpPath, "chain")
	pid := cmd.Process.Pid
	s := openSampler(t, Config{Frequency: 999, Pids: []uint32{uint32(pid)}, User: true, StackCopy: 16384, CopyAll: true,
		RingBufferSize: 64 << 10, Backlog: -1})
	lost := waitLost(t, s)
	end := startStack(t, pid) // now that the fixture has surely exec'd
	n, err := s.Read(func(x *Sample) {
		if x.SP+uint64(len(x.StackCopy)) != end {
			t.Errorf("kept copy [%#x, +%d) does not reach the stack's end %#x", x.SP, len(x.StackCopy), end)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if lost == 0 || n == 0 {
		t.Fatalf("read %d, lost %d; want both > 0 with a 64 KiB ring", n, lost)
	}
	t.Logf("read %d, lost %d", n, lost)
}

// Samples taken in the kernel copy the user stack from the user SP: in a
// frameless libc syscall wrapper, on x86-64 the copy starts with its
// return address into sys_loop; on arm64 that is in lr, and the copy
// starts with sys_loop's frame record, {main's fp, the return into main},
// which fp names.
func TestStackCopyInSyscall(t *testing.T) {
	requireFixture(t)
	fx := loadFixtureELF(t)
	intoLoop := syscallReturns(t, fx)
	inMain := fx.returnAfterCall(t, "main", "sys_loop")
	cmd, _ := startFixture(t, "syscalls")
	waitCPUTime(t, cmd.Process.Pid, 50*time.Millisecond) // past ld.so
	onEveryPath(t, func(t *testing.T, features *Features) {
		s := openSampler(t, Config{Frequency: 499, Pids: []uint32{uint32(cmd.Process.Pid)}, User: true, Kernel: true,
			StackCopy: 4096, CopyAll: true, features: features})
		got := collectCPU(t, s, time.Second, func(x *Sample) bool { return x.Pid == uint32(cmd.Process.Pid) && len(x.Kernel) > 0 })
		if len(got) < 10 {
			t.Fatalf("%d samples in the kernel, want ≥ 10", len(got))
		}
		for _, x := range got {
			if x.SP >= 0xffff800000000000 || len(x.stack) < 8 {
				t.Fatalf("kernel-mode sample: sp %#x, copy of %d bytes; want the user sp and its stack", x.SP, len(x.stack))
			}
			if fx.contains("sys_loop", x.PC) {
				continue // between the calls
			}
			if runtime.GOARCH == "arm64" {
				if !intoLoop[x.LR] || x.FP != x.SP || len(x.stack) < 16 || binary.LittleEndian.Uint64(x.stack[8:]) != inMain {
					t.Fatalf("pc %#x lr %#x fp %#x sp %#x: copy %x..., want lr into sys_loop %v, fp = sp and the return %#x into main at sp+8",
						x.PC, x.LR, x.FP, x.SP, x.stack[:min(len(x.stack), 16)], intoLoop, inMain)
				}
				continue
			}
			if ret := binary.LittleEndian.Uint64(x.stack); !intoLoop[ret] {
				t.Fatalf("pc %#x: copy starts with %#x, want the return address into sys_loop %v", x.PC, ret, intoLoop)
			}
		}
		t.Logf("%d samples in the kernel", len(got))
	})
}

// A process forked by a marked process is marked in the kernel, so its
// first samples already carry copies; the mark goes when it exits.
func TestSetCopyInheritedOnFork(t *testing.T) {
	requireFixture(t)
	parent, stdin := startFixture(t, "fork")
	ppid := uint32(parent.Process.Pid)
	s := openSampler(t, Config{Frequency: 499, User: true, StackCopy: 4096})
	if err := s.SetCopy(ppid, true); err != nil {
		t.Fatal(err)
	}
	if _, err := stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	var child uint32
	withCopy, without := 0, 0
	collect(t, s, time.Second, func(x *Sample) bool {
		if x.Comm != [16]byte{'f', 'p', 'w', 'a', 'l', 'k'} || x.Pid == ppid || parentOf(t, x.Pid) != ppid {
			return false
		}
		child = x.Pid
		if x.StackCopy != nil {
			withCopy++
		} else {
			without++
		}
		return false
	})
	if withCopy == 0 || without != 0 {
		t.Fatalf("forked child %d: %d samples with copies, %d without; want all with", child, withCopy, without)
	}
	killForgotten(t, s.marks.copyMarked, child)
}

// parentOf returns the parent of process pid (field 4 of /proc/PID/stat),
// 0 if it is gone.
func parentOf(t testing.TB, pid uint32) uint32 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	ppid, err := strconv.ParseUint(f[1], 10, 32)
	if err != nil {
		t.Fatalf("/proc/%d/stat: %q", pid, b)
	}
	return uint32(ppid)
}
