package bpf

import (
	"bytes"
	"runtime"
	"syscall"
	"testing"
)

// stackSwitchPath is the stack-switch fixture for this architecture.
func stackSwitchPath() string {
	if runtime.GOARCH == "arm64" {
		return "../testdata/bpf/arm64/stackswitch"
	}
	return "../testdata/bpf/stackswitch"
}

// returnAfterIndirectCall is the return address of run_on_stack's call of
// its fn: after call *%rsi (x86-64) or blr x1 (aarch64).
func (fx *fixtureELF) returnAfterIndirectCall(t testing.TB, fn string) uint64 {
	t.Helper()
	sym := fx.syms[fn]
	code := make([]byte, sym.Size)
	if _, err := fx.text.ReadAt(code, int64(sym.Value-fx.text.Addr)); err != nil {
		t.Fatal(err)
	}
	insn := []byte{0xff, 0xd6} // call *%rsi
	if runtime.GOARCH == "arm64" {
		insn = []byte{0x20, 0x00, 0x3f, 0xd6} // blr x1
	}
	i := bytes.Index(code, insn)
	if i < 0 {
		t.Fatalf("no indirect call in %s", fn)
	}
	return sym.Value + uint64(i+len(insn))
}

// A chain that goes from one stack down to another in the same mapping, as
// Go's runtime.systemstack does from a thread's g0 stack to a goroutine
// stack below it in one heap arena, is followed: spin runs on the upper
// half of a mapping, its record links to goroutine's on the lower half,
// and that one to main's stack. Before, the walk refused the record below
// and ended the stack at spin's caller, truncated.
func TestWalkStackBelowInSameMapping(t *testing.T) {
	requireFixture(t)
	fx := loadELF(t, stackSwitchPath())
	inRunOnStack := fx.returnAfterIndirectCall(t, "run_on_stack")
	want := []uint64{
		inRunOnStack, // spin's caller, on the upper half
		fx.returnAfterCall(t, "goroutine", "run_on_stack"), // on the lower half
		inRunOnStack,
		fx.returnAfterCall(t, "main", "run_on_stack"), // on main's stack
	}
	intoSpin := fx.returnAfterCall(t, "spin", "tick")
	onEveryPath(t, func(t *testing.T, features *Features) {
		cmd, _ := startBinary(t, stackSwitchPath())
		pid := cmd.Process.Pid
		s := openSampler(t, Config{Frequency: 499, Pids: []uint32{uint32(pid)}, User: true, features: features})
		got := collectN(t, s, 20, func(x *Sample) bool {
			return x.Pid == uint32(pid) && (fx.contains("spin", x.PC) || fx.contains("tick", x.PC))
		})
		if len(got) < 20 {
			t.Fatalf("%d samples in spin and tick, want ≥ 20", len(got))
		}
		for _, x := range got {
			chain := x.user[1:]
			if fx.contains("tick", x.PC) && len(chain) > 0 && chain[0] == intoSpin {
				chain = chain[1:]
			}
			if len(chain) <= len(want) || !equal(chain[:len(want)], want) {
				t.Fatalf("pc %#x: stack %s truncated %v, want [pc (spin) %s main's caller ...]",
					x.PC, hexFrames(x.user), x.UserTruncated, hexFrames(want))
			}
		}
	})
}

// A stack copy's top bounds copies, not frame records: a thread may run
// on many stacks in one mapping (Go's goroutines, in its heap), and the
// top a copy of one found need not be another's. The fixture waits on a
// stack in a mapping's second page, whose copies end at the third page
// (untouched, unreadable), then runs spin with its frame record below
// that top and its caller's, far_spin's, far above it; the walk goes on
// to main's stack. Before, it ended at far_spin, truncated.
func TestWalkAboveCopiedTop(t *testing.T) {
	requireFixture(t)
	fx := loadELF(t, stackSwitchPath())
	want := []uint64{
		fx.returnAfterCall(t, "far_spin", "spin"),
		fx.returnAfterIndirectCall(t, "run_on_stack"),
		fx.returnAfterCall(t, "far", "run_on_stack"),
	}
	intoSpin := fx.returnAfterCall(t, "spin", "tick")
	onEveryPath(t, func(t *testing.T, features *Features) {
		cmd, _ := startBinary(t, stackSwitchPath(), "above")
		pid := uint32(cmd.Process.Pid)
		s := openSampler(t, Config{Frequency: 499, Pids: []uint32{pid}, User: true, StackCopy: 16384, CopyAll: true,
			features: features})
		copied := collectN(t, s, 5, func(x *Sample) bool {
			return x.Pid == pid && len(x.StackCopy) > 0 && (fx.contains("wait_to_move", x.PC) || fx.contains("tick", x.PC))
		})
		if len(copied) < 5 {
			t.Fatalf("%d samples with stack copies in wait_to_move, want ≥ 5", len(copied))
		}
		for _, x := range copied {
			if len(x.stack) >= 4096 {
				t.Fatalf("a copy of %d bytes from the second page: want it to end at the third, untouched", len(x.stack))
			}
		}
		if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		got := collectN(t, s, 20, func(x *Sample) bool {
			return x.Pid == pid && (fx.contains("spin", x.PC) || fx.contains("tick", x.PC) && len(x.User) > 1 && x.User[1] == intoSpin)
		})
		if len(got) < 20 {
			t.Fatalf("%d samples in spin, want ≥ 20", len(got))
		}
		for _, x := range got {
			chain := x.user[1:]
			if fx.contains("tick", x.PC) {
				chain = chain[1:]
			}
			if len(chain) <= len(want) || !equal(chain[:len(want)], want) {
				t.Fatalf("pc %#x: stack %s truncated %v, want [pc (spin) %s above's caller ...]",
					x.PC, hexFrames(x.user), x.UserTruncated, hexFrames(want))
			}
		}
	})
}
