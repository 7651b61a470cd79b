package main

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/sprof/sprof/internal/testenv"
)

// goStackShare profiles the gostack fixture (testdata/e2e/gostack), built
// with go build's extra args, in mode and returns the share of its samples holding marker whose stacks
// go on, past marker, through each of callers in turn (the runtime
// function that ran marker's caller on another stack, first), on to a
// function of package main and the goroutine's root, runtime.goexit,
// unmarked; and how many samples held marker. t fails if a stack holding
// marker that stops short of runtime.goexit is not marked truncated.
func goStackShare(t *testing.T, args []string, mode, marker string, callers ...string) (float64, int64) {
	t.Helper()
	testenv.RequireRoot(t)
	bin := filepath.Join(t.TempDir(), "gostack")
	build := exec.Command("go", append(append([]string{"build", "-o", bin}, args...), "../../testdata/e2e/gostack")...)
	if slices.Contains(args, "-ldflags=-linkmode=external") {
		testenv.RequireTool(t, "gcc")
		build.Env = append(build.Environ(), "CGO_ENABLED=1")
	}
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build gostack %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	p := profileRunning(t, bin, mode)
	p.Sample = slices.DeleteFunc(p.Sample, func(s *profile.Sample) bool {
		return !slices.Contains(names(s), marker)
	})
	// A stack that stops short of the goroutine's root says so.
	for _, s := range p.Sample {
		if fns := names(s); len(fns) > 0 && !exiting(s) && fns[len(fns)-1] != "runtime.goexit" && fns[len(fns)-1] != "[truncated]" {
			t.Errorf("a stack through %s ends in %s, unmarked: %s", marker, fns[len(fns)-1], strings.Join(fns, " <- "))
		}
	}
	want := append([]string{marker}, callers...)
	return sampleShare(t, p, "gostack", strings.Join(want, " <- ")+" <- main.* <- runtime.goexit", func(fns []string) bool {
		if len(fns) == 0 || fns[len(fns)-1] != "runtime.goexit" {
			return false
		}
		i := slices.Index(fns, marker)
		for _, fn := range callers {
			j := slices.Index(fns[i+1:], fn)
			if j < 0 {
				return false
			}
			i += 1 + j
		}
		return slices.ContainsFunc(fns[i+1:], func(fn string) bool { return strings.HasPrefix(fn, "main.") })
	})
}

// checkGoStackShare fails t unless share of total samples is at least
// least, of at least 30 samples.
func checkGoStackShare(t *testing.T, share float64, total int64, least float64) {
	t.Helper()
	if total < 30 {
		t.Errorf("only %d samples in 2 s of CPU time at 499 Hz, want >= 30", total)
	}
	if share < least {
		t.Errorf("%.2f%% of them reach the goroutine's root, want >= %.0f%%", 100*share, 100*least)
	}
}

// TestRecordGoAssistChain: the GC work a goroutine is made to do when it
// allocates during marking runs on the thread's g0 stack through
// runtime.systemstack, whose frame record links back to the goroutine's
// stack: samples in runtime.gcAssistAlloc1 go on through systemstack to
// the allocating goroutine's functions and its root, charged to it as
// Go's own profiler charges them.
func TestRecordGoAssistChain(t *testing.T) {
	share, total := goStackShare(t, nil, "assist", "runtime.gcAssistAlloc1", "runtime.systemstack",
		"runtime.gcAssistAlloc", "runtime.mallocgc")
	checkGoStackShare(t, share, total, 0.95)
}

// TestRecordGoMorestackChain: a goroutine whose stack grows runs
// runtime.newstack on the g0 stack with no frame-pointer link back, which
// the sampler follows through g0.m.curg.sched (sprof.bpf.c,
// follow_goroutine): samples in newstack go on through runtime.morestack
// to the function whose prologue called it, its callers and the
// goroutine's root.
//
// 97.4-98.7% at load averages of 8 to 20 (ten runs); the rest stop
// short, marked truncated: in copystack's loop that adjusts the new
// stack's frames after the switch to it (the frames not adjusted yet
// still point into the old stack), or in the scheduler after
// gopreempt_m, when the goroutine is no longer the thread's.
func TestRecordGoMorestackChain(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
	}{
		{"go linker", nil},
		// cgo: the C linker puts its start-up code before Go's, which
		// the function table's addresses count from, and runtime.tlsg
		// among C's thread-locals.
		{"C linker", []string{"-ldflags=-linkmode=external"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			share, total := goStackShare(t, c.args, "grow", "runtime.newstack", "runtime.morestack", "main.recurse", "main.grow")
			checkGoStackShare(t, share, total, 0.95)
		})
	}
}
