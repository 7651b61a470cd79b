package bpf

import (
	"debug/elf"
	"debug/gosym"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sprof/sprof/internal/testenv"
	"github.com/sprof/sprof/unwind/goruntime"
)

// goStackFixture builds testdata/e2e/gostack with the installed toolchain
// (or takes $SPROF_GOSTACK, built so by the kernel matrix for its VMs,
// which have none) and returns its path, its function table and the
// GoProcess of a process running it: the Go linker's default executable
// is not position independent, so its addresses are the run-time ones.
func goStackFixture(t testing.TB) (string, *gosym.Table, *GoProcess) {
	t.Helper()
	requireFixture(t)
	bin := os.Getenv("SPROF_GOSTACK")
	if bin == "" {
		if _, err := exec.LookPath("go"); err != nil {
			testenv.Unavailable(t, "no go toolchain to build testdata/e2e/gostack, and no $SPROF_GOSTACK")
		}
		bin = filepath.Join(t.TempDir(), "gostack")
		if out, err := exec.Command("go", "build", "-o", bin, "../testdata/e2e/gostack").CombinedOutput(); err != nil {
			t.Fatalf("build gostack: %v\n%s", err, out)
		}
	}
	fh, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	f, err := elf.NewFile(fh)
	if err != nil {
		t.Fatal(err)
	}
	if f.Type != elf.ET_EXEC {
		t.Fatalf("gostack is %v, want a fixed-address executable", f.Type)
	}
	code, err := goruntime.ReadCode(f)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := code.Runtime(f, fh)
	if err != nil {
		t.Fatal(err)
	}
	pcln, err := f.Section(".gopclntab").Data()
	if err != nil {
		t.Fatal(err)
	}
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(pcln, f.Section(".text").Addr))
	if err != nil {
		t.Fatal(err)
	}
	return bin, tab, &GoProcess{MorestackStart: rt.Morestack.Start, MorestackEnd: rt.Morestack.End, TLSG: rt.TLSG, Layout: rt.Layout}
}

// funcName names the function holding user frame i of stack.
func funcName(tab *gosym.Table, stack []uint64, i int) string {
	pc := stack[i]
	if i > 0 {
		pc-- // a return address: the call before it
	}
	if fn := tab.PCToFunc(pc); fn != nil {
		return fn.Name
	}
	return fmt.Sprintf("%#x", pc)
}

// returnsInto reports whether ret, a return address, follows a call in
// g's runtime.morestack.
func returnsInto(g *GoProcess, ret uint64) bool {
	return g.MorestackStart < ret && ret <= g.MorestackEnd
}

// growing keeps the samples of pid that ran under runtime.newstack: the
// walk reached a return address into morestack.
func growing(pid int, g *GoProcess) func(*Sample) bool {
	return func(x *Sample) bool {
		return x.Pid == uint32(pid) && slices.ContainsFunc(x.User[1:], func(ret uint64) bool { return returnsInto(g, ret) })
	}
}

// sampleGrowing starts the fixture's goroutines growing their stacks and
// a sampler of its user stacks at hz, told to follow morestack in it.
func sampleGrowing(t *testing.T, bin string, g *GoProcess, hz int, features *Features) (int, *Sampler) {
	t.Helper()
	cmd, _ := startBinary(t, bin, "grow")
	pid := cmd.Process.Pid
	s := openSampler(t, Config{Frequency: hz, Pids: []uint32{uint32(pid)}, User: true, features: features})
	if err := s.SetGo(uint32(pid), g); err != nil {
		t.Fatal(err)
	}
	return pid, s
}

// A goroutine whose stack grows runs newstack on the g0 stack with the
// frame pointer cleared; with the process marked (SetGo), its samples go
// on past morestack to the function that called it and the goroutine's
// root, on every kernel path, and say so (Sample.Goroutine); so do those
// taken on arm64 in runtime.save_g, which morestack calls with the frame
// pointer of the growing function's caller. Unmarked, they end at
// morestack, truncated or not (user space marks them), but for those whose
// leaf returns into morestack (save_g), which go on past it unfollowed,
// frames skipped (user space cuts them: TestMorestackMarksTruncated).
// Samples taken while copystack adjusts the new stack's chain reach the
// root through the old stack's first record (switch_stack); without that
// 1-6% of them ended truncated at the goroutine's first function. Those
// taken after copystack pointed g.sched.bp into the new stack and before
// it switched g.stack go on through the copy of the caller's record
// (follow_goroutine): 1-5 in 4,000 ended truncated without that. Those of
// a goroutine that gives up its thread in newstack are not counted (see
// yields). Of the others, 0-1.5% ended at morestack in the kernel matrix's
// amd64 VMs, and a few in a thousand there now (those of a signal handler
// on the thread's signal stack are followed since; left are the few
// instructions in which the goroutine's registers and stack bounds
// disagree), so the bar is 97%.
func TestWalkFollowsMorestack(t *testing.T) {
	bin, tab, g := goStackFixture(t)
	onEveryPath(t, func(t *testing.T, features *Features) {
		pid, s := sampleGrowing(t, bin, g, 499, features)
		// An emulated CPU sustains a fraction of the rate: 13-21 were
		// seen in 10 s of the fixture's CPU time in the kernel matrix's
		// arm64 VMs, so there the fixture runs up to 40 s for them.
		want, budget := 50, 10*time.Second
		if testenv.EmulatedCPU() {
			want, budget = 15, 40*time.Second
		}
		got := collectUntil(t, s, budget, growing(pid, g), func(got []sampleCopy) bool { return len(got) >= want })
		if len(got) < want {
			t.Fatalf("%d samples under morestack, want >= %d", len(got), want)
		}
		whole, leaves, yielded := 0, 0, 0
		var bad []string
		for _, x := range got {
			n := len(x.user)
			i := 1
			for i < n && !returnsInto(g, x.user[i]) {
				i++
			}
			if i == 1 && x.LeafReturn {
				leaves++
			}
			if yields(tab, x.user[:i]) {
				yielded++
				continue
			}
			if !x.UserTruncated && x.Goroutine && i+2 < n && funcName(tab, x.user, i+1) == "main.recurse" &&
				funcName(tab, x.user, n-1) == "runtime.goexit" {
				whole++
			} else if len(bad) < 5 {
				var below []string
				for j := range min(i, n) {
					below = append(below, funcName(tab, x.user, j))
				}
				bad = append(bad, fmt.Sprintf("truncated %v, followed %v, past morestack %d frames, %s ... %s, under %s", x.UserTruncated,
					x.Goroutine, n-i-1, funcName(tab, x.user, min(i+1, n-1)), funcName(tab, x.user, n-1), strings.Join(below, " <- ")))
			}
		}
		grew := len(got) - yielded
		t.Logf("%d of %d samples under morestack (%d with its leaf returning into it, %d of a goroutine giving up its thread) go on to main.recurse and runtime.goexit; others: %q",
			whole, grew, leaves, yielded, bad)
		if grew < want/2 {
			t.Fatalf("%d of %d samples under morestack grew a stack, want >= %d", grew, len(got), want/2)
		}
		if whole*100 < grew*97 {
			t.Errorf("%d of %d samples under morestack reach the goroutine's root, want >= 97%%", whole, grew)
		}
		if err := s.SetGo(uint32(pid), nil); err != nil {
			t.Fatal(err)
		}
		// Only samples that began after the mark went: one begun before
		// may reach the ring after any drain.
		since := monotonic(t)
		under := growing(pid, g)
		for _, x := range collectN(t, s, 20, func(x *Sample) bool { return x.Time > since && under(x) }) {
			last := x.user[len(x.user)-1]
			if x.Goroutine {
				t.Fatalf("unmarked, a walk says it followed the goroutine: %s", funcName(tab, x.user, len(x.user)-1))
			}
			if !returnsInto(g, last) && !(x.LeafReturn && returnsInto(g, x.user[1])) {
				t.Fatalf("unmarked, a walk went on past morestack to %s", funcName(tab, x.user, len(x.user)-1))
			}
		}
	})
}

// inMorestack reports whether user, a stack of g's process, was sampled
// in runtime.morestack or morestack_noctxt.
func inMorestack(g *GoProcess, user []uint64) bool {
	return len(user) > 0 && g.MorestackStart <= user[0] && user[0] < g.MorestackEnd
}

// Samples taken in runtime.morestack or morestack_noctxt themselves go on
// to the goroutine's root, on every kernel path: before morestack
// switches to g0 from the registers and the goroutine's stack, after it
// from g.sched. Left is one instruction, morestack clearing the frame
// pointer once sp is on g0: the walk from the goroutine's record is cut
// there and marked truncated; a failed check ends the walk at morestack,
// which user space marks. So a sample taken in morestack is whole,
// followed and rooted in runtime.goexit, or not followed and marked, and
// at least 90% are whole. About 1 in 300 of the fixture's samples is one,
// hence 4,999 Hz.
func TestWalkInMorestack(t *testing.T) {
	bin, tab, g := goStackFixture(t)
	onEveryPath(t, func(t *testing.T, features *Features) {
		pid, s := sampleGrowing(t, bin, g, 4999, features)
		want, budget := 20, 20*time.Second
		if testenv.EmulatedCPU() {
			want, budget = 10, 60*time.Second
		}
		in := func(x *Sample) bool { return x.Pid == uint32(pid) && inMorestack(g, x.User) }
		got := collectUntil(t, s, budget, in, func(got []sampleCopy) bool { return len(got) >= want })
		if len(got) < want {
			t.Fatalf("%d samples taken in morestack, want >= %d", len(got), want)
		}
		whole, marked := 0, 0
		for _, x := range got {
			n := len(x.user)
			switch {
			case !x.UserTruncated && x.Goroutine && n > 2 && funcName(tab, x.user, n-1) == "runtime.goexit":
				whole++
			case !x.Goroutine && (x.UserTruncated || n == 1): // n == 1: user space marks it
				marked++
			default:
				t.Errorf("taken in %s: truncated %v, followed %v, %d frames, %s ... %s", funcName(tab, x.user, 0),
					x.UserTruncated, x.Goroutine, n, funcName(tab, x.user, min(1, n-1)), funcName(tab, x.user, n-1))
			}
		}
		t.Logf("%d of %d samples taken in morestack whole, %d truncated", whole, len(got), marked)
		if whole*10 < len(got)*9 {
			t.Errorf("%d of %d samples taken in morestack whole, want >= 90%%", whole, len(got))
		}
	})
}

// yields reports whether frames, those of a sample below morestack's,
// hold one of the functions through which newstack gives up the thread
// when the goroutine was asked to stop rather than to grow (preemption:
// sysmon asks a goroutine that ran 10 ms so, through the same stack check
// in a function's prologue). From the moment the scheduler drops the
// goroutine (m.curg = nil) the walk cannot follow it, and the g0 stack the
// scheduler runs on ends at morestack: such samples are marked truncated.
// In the kernel matrix's amd64 VMs 0-1.5% of the fixture's samples under
// morestack were such.
func yields(tab *gosym.Table, frames []uint64) bool {
	for i := range frames {
		switch funcName(tab, frames, i) {
		case "runtime.gopreempt_m", "runtime.preemptPark", "runtime.goschedImpl", "runtime.schedule":
			return true
		}
	}
	return false
}

// BenchmarkGoMorestack measures the program's run time on a Go program
// whose goroutines' stacks keep growing (testdata/e2e/gostack grow), at
// 999 Hz, with the process marked (follow=true: samples under morestack
// go on to the goroutine) and not (they end at morestack), on each kernel
// path. bpf-ns/run is over every run, the filtered ones included;
// followed is the share of samples whose walk went past morestack. The
// difference of the two is the follow's cost spread over all samples;
// samples not under morestack pay a hash lookup at the walk's end.
func BenchmarkGoMorestack(b *testing.B) {
	bin, _, g := goStackFixture(b)
	for _, path := range kernelPaths {
		for _, follow := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/follow=%v", path.name, follow), func(b *testing.B) {
				cmd, _ := startBinary(b, bin, "grow")
				pid := cmd.Process.Pid
				s := openSampler(b, Config{Frequency: 999, Pids: []uint32{uint32(pid)}, User: true, features: pathFeatures(path.without), RunTimeStats: true})
				if follow {
					if err := s.SetGo(uint32(pid), g); err != nil {
						b.Fatal(err)
					}
				}
				var samples, under, past int
				count := func(x *Sample) {
					samples++
					if growing(pid, g)(x) {
						under++
						if !returnsInto(g, x.User[len(x.User)-1]) {
							past++
						}
					}
				}
				drainLoop(b, s, count)
				if samples == 0 {
					b.Fatal("no samples")
				}
				b.ReportMetric(float64(under)/float64(samples), "under-morestack")
				b.ReportMetric(float64(past)/float64(max(under, 1)), "followed")
			})
		}
	}
}
