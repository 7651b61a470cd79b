// Package unwindcheck holds what the unwinding accuracy tests share: the
// fixtures of testdata/unwind, and the check that a profiled stack is the
// fixture's known chain, compare → libc's qsort → run → main.
//
// The fixtures spin in compare, a callback of libc's qsort, so a correct
// unwinder must cross a binary without frame pointers (the fixture, built
// -O2 -fomit-frame-pointer) into Debian's libc (only .eh_frame) and back.
package unwindcheck

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sprof/sprof/internal/proctime"
	"github.com/sprof/sprof/stacks"
)

// Fixtures are the fixture binaries, by what unwinds their code.
var Fixtures = []struct{ Name, File string }{
	{"sframe", "spin-sframe"},
	{"eh_frame", "spin-ehframe"},
}

// Path returns the path of a fixture from a test in repository directory
// dir (relative, as "../.." from collector/bpfsource).
func Path(t testing.TB, root, file string) string {
	t.Helper()
	if runtime.GOARCH != "amd64" {
		t.Skipf("the unwinding fixtures are amd64 builds; this is %s", runtime.GOARCH)
	}
	p, err := filepath.Abs(filepath.Join(root, "testdata", "unwind", file))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Start runs the fixture at path until the test ends, and returns once it
// is past its start-up (in ld.so and libc's initialization, which the
// chain check would count as misses): when it has used 50 ms of CPU,
// which start-up takes a fiftieth of, however long a loaded host takes
// to give it that.
func Start(t testing.TB, path string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(path)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start fixture: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	proctime.Ran(t, cmd.Process.Pid, 50*time.Millisecond)
	return cmd
}

// chainRE is the known chain, leaf first: the sample is in compare under
// libc's qsort, in qsort itself, or in run, and main calls run.
var chainRE = regexp.MustCompile(`^((compare )?libc( libc)* )?run main( |$)`)

// Chain names a sample's user frames, leaf first: the fixture's functions
// by name, libc's as "libc", others by file or "?".
func Chain(s *stacks.Sample, fixture string) string {
	var b strings.Builder
	for _, l := range s.Stack {
		if l.Mapping == nil || l.Mapping.Kind != stacks.User {
			continue
		}
		name := "?"
		switch {
		case l.Mapping.File == fixture && len(l.Frames) > 0:
			name = l.Frames[len(l.Frames)-1].Function
		case strings.HasPrefix(filepath.Base(l.Mapping.File), "libc.so"):
			name = "libc"
		case l.Mapping.File != "":
			name = filepath.Base(l.Mapping.File)
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(name)
	}
	return b.String()
}

// Known reports whether a chain is the fixture's, down to main.
func Known(chain string) bool { return chainRE.MatchString(chain) }

// Share returns the fraction of the samples of pid in p whose user stack
// is the known chain, the sample count, and the commonest other chains.
func Share(p *stacks.Profile, pid uint32, fixture string) (float64, int64, map[string]int64) {
	var good, all int64
	bad := map[string]int64{}
	for _, s := range p.Samples {
		if s.Pid != pid {
			continue
		}
		all += s.Count
		if c := Chain(s, fixture); Known(c) {
			good += s.Count
		} else {
			bad[c] += s.Count
		}
	}
	if all == 0 {
		return 0, 0, bad
	}
	return float64(good) / float64(all), all, bad
}

// ReachMain returns the fraction of the samples of pid in p whose user
// stack holds the fixture's main, the measure compared with perf's.
func ReachMain(p *stacks.Profile, pid uint32, fixture string) float64 {
	var good, all int64
	for _, s := range p.Samples {
		if s.Pid != pid {
			continue
		}
		all += s.Count
		if slices.Contains(strings.Fields(Chain(s, fixture)), "main") {
			good += s.Count
		}
	}
	if all == 0 {
		return 0
	}
	return float64(good) / float64(all)
}
