// Package proctime lets a test wait for what a process has done rather
// than for a span of the wall clock. On a loaded host (CI runs the
// packages' tests in parallel on two CPUs) a process gets a fraction of a
// CPU, so a fixture that was given two seconds may have run for a tenth
// of that: a sampling test that waits two seconds and then counts samples
// fails by load. A process's CPU time is what its samples are taken in
// (a cpu-clock sample lands on whatever runs when the CPU's timer fires),
// so a test that waits for CPU time gets the same samples on any host.
package proctime

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// CPU returns the CPU time process pid has run, all its live threads
// together, from the scheduler's statistics (/proc/PID/task/TID/schedstat,
// in ns, where /proc/PID/stat counts 10 ms ticks). It fails once the
// process has exited, zombie or reaped: it will run no more.
func CPU(pid int) (time.Duration, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("pid %d: %w", pid, err)
	}
	// The state is the field after the command's closing ')'.
	if f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:])); len(f) == 0 || f[0] == "Z" || f[0] == "X" {
		return 0, fmt.Errorf("pid %d has exited", pid)
	}
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(tasks) == 0 {
		return 0, fmt.Errorf("pid %d: no threads' schedstat (%v)", pid, err)
	}
	var sum time.Duration
	for _, path := range tasks {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // a thread that just exited
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			return 0, fmt.Errorf("%s: %q: no run time", path, b)
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %q: %w", path, b, err)
		}
		sum += time.Duration(ns)
	}
	return sum, nil
}

// Until returns once cond holds, checking it every 10 ms (how often
// changes only how soon it returns). It fails t if process pid runs for
// budget of CPU time from now without cond holding, or exits: budget is
// what the condition needs of pid's work (at 99 Hz, 200 samples of a
// spinning process take 2 s of its CPU time), however long the host
// takes to give it that. A process that gets no CPU at all keeps the
// test waiting until go test's -timeout, which says so.
func Until(t testing.TB, pid int, budget time.Duration, what string, cond func() bool) {
	t.Helper()
	start, err := CPU(pid)
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		ran, err := CPU(pid)
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ran-start >= budget {
			if cond() { // it may have come meanwhile
				return
			}
			t.Fatalf("pid %d ran %v of CPU time, still waiting for %s", pid, (ran - start).Round(time.Millisecond), what)
		}
		<-tick.C
	}
}

// Ran returns once process pid has run d of CPU time from now: a test
// samples it for d whatever the host's load. It fails t if pid exits
// first.
func Ran(t testing.TB, pid int, d time.Duration) {
	t.Helper()
	if err := Wait(pid, d); err != nil {
		t.Fatal(err)
	}
}

// Wait is Ran for a goroutine other than the test's, which must not
// fail the test itself: it returns once pid has run d of CPU time from
// now, or an error if pid exits first.
func Wait(pid int, d time.Duration) error {
	start, err := CPU(pid)
	if err != nil {
		return fmt.Errorf("waiting for pid %d to run %v: %w", pid, d, err)
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		ran, err := CPU(pid)
		if err != nil {
			return fmt.Errorf("waiting for pid %d to run %v: %w", pid, d, err)
		}
		if ran-start >= d {
			return nil
		}
		<-tick.C
	}
}
