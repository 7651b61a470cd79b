package bpf

import (
	"runtime"
	"testing"
)

// pltLeafPath is the PLT-leaf fixture for this architecture.
func pltLeafPath() string {
	if runtime.GOARCH == "arm64" {
		return "../testdata/bpf/arm64/pltleaf"
	}
	return "../testdata/bpf/pltleaf"
}

// A sample in a PLT stub, a frameless leaf, keeps its caller: on arm64 from
// the link register (GNU ld emits no unwind table for aarch64's .plt, and
// the stub lies right below its caller, where the rule for other leaves
// refuses lr), on x86-64 from the top of the stack; then the frame records.
// Before, arm64 samples there lost c without a truncation mark.
func TestWalkPLTStubLeaf(t *testing.T) {
	requireFixture(t)
	fx := loadELF(t, pltLeafPath())
	want := []uint64{
		fx.returnAfterCall(t, "c", "stub"),
		fx.returnAfterCall(t, "b", "c"),
		fx.returnAfterCall(t, "a", "b"),
		fx.returnAfterCall(t, "main", "a"),
	}
	onEveryPath(t, func(t *testing.T, features *Features) {
		cmd, _ := startBinary(t, pltLeafPath())
		pid := cmd.Process.Pid
		s := openSampler(t, Config{Frequency: 499, Pids: []uint32{uint32(pid)}, User: true, features: features})
		got := collectN(t, s, 20, func(x *Sample) bool { return x.Pid == uint32(pid) && fx.contains("stub", x.PC) })
		if len(got) < 20 {
			t.Fatalf("%d samples in the stub, want ≥ 20", len(got))
		}
		for _, x := range got {
			if len(x.user) < 1+len(want) || !equal(x.user[1:1+len(want)], want) || !x.LeafReturn {
				t.Fatalf("pc %#x: stack %s leaf return %v, want [pc %s ...] from the leaf rule",
					x.PC, hexFrames(x.user), x.LeafReturn, hexFrames(want))
			}
		}
	})
}
