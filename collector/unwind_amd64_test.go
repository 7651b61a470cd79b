package collector_test

import (
	"bytes"
	"encoding/binary"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sprof/sprof/collector"
	"github.com/sprof/sprof/internal/testenv"
	"github.com/sprof/sprof/internal/unwindcheck"
	"github.com/sprof/sprof/symbolize"
	"github.com/sprof/sprof/unwind"
)

// copySource hands over recorded samples and records the processes the
// collector marks for stack copies.
type copySource struct {
	mu      sync.Mutex
	samples []collector.Sample
	marks   map[uint32]bool
}

func (s *copySource) Read(fn func(*collector.Sample)) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.samples {
		fn(&s.samples[i])
	}
	n := len(s.samples)
	s.samples = nil
	return n, nil
}

func (s *copySource) Lost() (uint64, error) { return 0, nil }

func (s *copySource) SetCopy(pid uint32, on bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.marks[pid] = on
	return nil
}

// stopAndCopy stops pid with ptrace and returns a sample as the BPF
// sampler would make it: the user registers (of amd64, the only
// architecture this file builds on), the stack above SP (up to 16 KiB)
// and the frame-pointer walk of that copy.
func stopAndCopy(t *testing.T, pid int) collector.Sample {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.PtraceAttach(pid); err != nil {
		t.Fatalf("ptrace attach: %v", err)
	}
	defer unix.PtraceDetach(pid)
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, unix.WALL, nil); err != nil {
		t.Fatalf("wait: %v", err)
	}
	var regs unix.PtraceRegs
	if err := unix.PtraceGetRegs(pid, &regs); err != nil {
		t.Fatalf("get registers: %v", err)
	}
	mem, err := os.Open("/proc/" + strconv.Itoa(pid) + "/mem")
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	const want, page = 16 << 10, 4096
	stack := make([]byte, want)
	n := 0
	for n < want {
		// Up to the next page boundary, so the read stops at the
		// stack's end like the sampler's copy.
		end := min(want, n+page-int((regs.Rsp+uint64(n))%page))
		m, err := mem.ReadAt(stack[n:end], int64(regs.Rsp)+int64(n))
		n += m
		if err != nil || m == 0 {
			break
		}
	}
	s := collector.Sample{
		Time: monotonic(), Pid: uint32(pid), Tid: uint32(pid),
		PC: regs.Rip, SP: regs.Rsp, FP: regs.Rbp,
		StackCopy: stack[:n], StackCopyTruncated: n == want,
	}
	copy(s.Comm[:], "spin")
	s.User = fpWalk(s.PC, s.FP, s.SP, s.StackCopy)
	return s
}

// fpWalk follows the frame-pointer chain through a stack copy, as the BPF
// program does.
func fpWalk(pc, fp, sp uint64, stack []byte) []uint64 {
	out := []uint64{pc}
	for len(out) < 128 && fp >= sp && fp+16 <= sp+uint64(len(stack)) && fp%8 == 0 {
		off := fp - sp
		next := binary.LittleEndian.Uint64(stack[off:])
		ra := binary.LittleEndian.Uint64(stack[off+8:])
		if ra == 0 {
			break
		}
		out = append(out, ra)
		if next <= fp {
			break
		}
		fp = next
	}
	return out
}

func monotonic() uint64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

// TestUnwindFixtures unwinds stacks of the fixtures stopped at random
// points with ptrace — the sampler's view of them without the BPF
// program — and wants the known chain down to main in at least 99.5% of
// them: through the fixture's .sframe or .eh_frame and libc's .eh_frame.
func TestUnwindFixtures(t *testing.T) {
	testenv.RequireRoot(t)
	for _, fx := range unwindcheck.Fixtures {
		t.Run(fx.Name, func(t *testing.T) {
			path := unwindcheck.Path(t, "..", fx.File)
			cmd := unwindcheck.Start(t, path)
			pid := cmd.Process.Pid
			src := &copySource{marks: map[uint32]bool{}}
			c, err := collector.New(collector.Options{
				Frequency: 99, Pids: []uint32{uint32(pid)}, NoSideband: true,
				StackCopy: true, DebugUnwind: true,
				// No debug directories: libc6-dbg would cost seconds and
				// the chain names only the fixture's functions.
				Symbolizer: symbolize.NewELF(symbolize.Options{DebugDirs: []string{t.TempDir()}}),
			})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			const n = 400
			for range n {
				src.samples = append(src.samples, stopAndCopy(t, pid))
				time.Sleep(time.Duration(200+len(src.samples)%7*100) * time.Microsecond)
			}
			if err := c.Drain(src); err != nil {
				t.Fatal(err)
			}
			if !src.marks[uint32(pid)] {
				t.Errorf("pid %d not marked for stack copies; marks %v", pid, src.marks)
			}
			share, all, bad := unwindcheck.Share(c.Profile(), uint32(pid), path)
			st := c.UnwindStats()
			var text bytes.Buffer
			st.WriteText(&text)
			t.Logf("%d samples, %.2f%% with the known chain\n%s", all, 100*share, text.String())
			if all != n {
				t.Errorf("%d samples in the profile, want %d", all, n)
			}
			if share < 0.995 {
				t.Errorf("%.2f%% of the samples show compare → libc → run → main, want ≥ 99.5%%; others: %v", 100*share, bad)
				for _, s := range c.Profile().Samples {
					if !unwindcheck.Known(unwindcheck.Chain(s, path)) {
						for _, l := range s.Stack {
							t.Logf("  %s %#x %v", l.Mapping.File, l.Address, l.Frames)
						}
					}
				}
			}
			if st.Frames[unwind.MethodEHFrame] == 0 {
				t.Errorf("no frame unwound with .eh_frame rules (libc has no .sframe)")
			}
			if fx.Name == "sframe" && st.Frames[unwind.MethodSFrame] == 0 {
				t.Errorf("no frame unwound with .sframe rules")
			}
			if fx.Name == "eh_frame" && st.Frames[unwind.MethodSFrame] != 0 {
				t.Errorf("%d frames unwound with .sframe in a program without it", st.Frames[unwind.MethodSFrame])
			}
		})
	}
}
