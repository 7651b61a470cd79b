package collector

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sprof/sprof/internal/testenv"
	"github.com/sprof/sprof/stacks"
	"github.com/sprof/sprof/symbolize"
)

// elfSymbolizer looks offsets up in a binary's .symtab with debug/elf: a
// small oracle that also proves Binary.Path can be opened.
type elfSymbolizer struct{ opened []symbolize.Binary }

func (e *elfSymbolizer) Symbolize(dst []stacks.Frame, b symbolize.Binary, off uint64) ([]stacks.Frame, error) {
	e.opened = append(e.opened, b)
	f, err := elf.Open(b.Path)
	if err != nil {
		return dst, err
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		return dst, err
	}
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || off < p.Off || off >= p.Off+p.Filesz {
			continue
		}
		vaddr := off - p.Off + p.Vaddr
		for _, s := range syms {
			if elf.ST_TYPE(s.Info) == elf.STT_FUNC && vaddr >= s.Value && vaddr < s.Value+s.Size {
				return append(dst, stacks.Frame{Function: s.Name}), nil
			}
		}
	}
	return dst, nil
}

// runShortlived runs the fixture to its end and returns its pid, the
// runtime address of its work function and a CLOCK_MONOTONIC time at which
// it ran.
func runShortlived(t *testing.T) (path string, pid uint32, work, at uint64) {
	path, err := filepath.Abs("../testdata/collector/shortlived")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd := exec.Command(path)
	cmd.Stdout = &out
	began := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if d := time.Since(began); d > 2*time.Second {
		t.Logf("the ~100 ms fixture took %v", d)
	}
	work, at = parseFixture(t, out.String())
	return path, uint32(cmd.Process.Pid), work, at
}

// parseFixture reads the fixture's line: the address of work and a time.
func parseFixture(t *testing.T, line string) (work, at uint64) {
	t.Helper()
	if _, err := fmt.Sscanf(line, "0x%x %d", &work, &at); err != nil {
		t.Fatalf("fixture printed %q: %v", line, err)
	}
	return work, at
}

// TestShortLivedProcess: a process that execs, runs 100 ms and exits
// between two drains is attributed to its binary and build ID, and
// symbolized, from the side band alone.
func TestShortLivedProcess(t *testing.T) {
	testenv.RequireRoot(t)
	sym := &elfSymbolizer{}
	c, err := New(Options{Frequency: 99, Symbolizer: sym})
	if err != nil {
		t.Fatal(err)
	}
	if c.Stats().Sideband != nil {
		c.Close()
		t.Fatalf("side band unavailable as root: %v", c.Stats().Sideband)
	}
	path, pid, work, at := runShortlived(t)
	src := &fakeSource{}
	// A sample inside work, called from main: the return address is
	// made up but lies in the binary too.
	src.add(pid, at+1000, work+8, work-0x10)
	prof, st, err := c.Run(closedContext(), src, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(prof.Samples) != 1 {
		t.Fatalf("%d samples, want 1", len(prof.Samples))
	}
	leaf := prof.Samples[0].Stack[0]
	if m := leaf.Mapping; m.Kind != stacks.User || m.File != path || m.BuildID != fileBuildID(t, path) {
		t.Fatalf("leaf mapping %+v, want %s with build ID %s", m, path, fileBuildID(t, path))
	}
	if !leaf.Symbolized() || leaf.Frames[0].Function != "work" {
		t.Fatalf("leaf symbolized as %+v, want work", leaf.Frames)
	}
	if st.Processes != 1 || st.Samples != 1 || st.Sideband != nil {
		t.Errorf("stats %+v", st)
	}
	t.Logf("symbolized through %+v", sym.opened[0])

	// The control: from /proc alone the same sample is lost to
	// [unknown], since the process is gone when it is drained.
	c, err = New(Options{Frequency: 99, NoSideband: true})
	if err != nil {
		t.Fatal(err)
	}
	_, pid, work, at = runShortlived(t)
	src.add(pid, at+1000, work+8)
	prof, _, err = c.Run(closedContext(), src, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m := prof.Samples[0].Stack[0].Mapping; m.Kind != stacks.Unknown {
		t.Errorf("without the side band, an exited process was attributed to %s", m.File)
	}
}

// TestShortLivedChildFollowed: recording a command and its children
// (sprof record -- CMD), a child that the command forks and that execs,
// runs 100 ms and exits between two drains is attributed to its binary and
// symbolized from the side band, though its mmap records may be read before
// the fork record that makes it tracked.
func TestShortLivedChildFollowed(t *testing.T) {
	testenv.RequireRoot(t)
	path, err := filepath.Abs("../testdata/collector/shortlived")
	if err != nil {
		t.Fatal(err)
	}
	// The shell waits for a line, so it is tracked before it forks.
	sh := exec.Command("sh", "-c", `read x; "$0" & echo "pid $!"; wait`, path)
	release, err := sh.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	sh.Stdout = &out
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	c, err := New(Options{Frequency: 99, Symbolizer: &elfSymbolizer{}, Pids: []uint32{uint32(sh.Process.Pid)}, FollowForks: true})
	if err != nil {
		sh.Process.Kill()
		sh.Wait()
		t.Fatal(err)
	}
	release.Write([]byte("\n"))
	release.Close()
	if err := sh.Wait(); err != nil {
		c.Close()
		t.Fatalf("sh: %v", err)
	}
	var child uint32
	var work, at uint64
	for line := range strings.Lines(out.String()) {
		if p, ok := strings.CutPrefix(line, "pid "); ok {
			fmt.Sscan(p, &child)
		} else {
			work, at = parseFixture(t, line)
		}
	}
	src := &fakeSource{}
	src.add(child, at+1000, work+8)
	prof, st, err := c.Run(closedContext(), src, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Sideband != nil {
		t.Fatalf("side band unavailable as root: %v", st.Sideband)
	}
	leaf := prof.Samples[0].Stack[0]
	if m := leaf.Mapping; m.File != path || m.BuildID != fileBuildID(t, path) {
		t.Fatalf("the child's leaf in %q with build ID %q, want %s", m.File, m.BuildID, path)
	}
	if !leaf.Symbolized() || leaf.Frames[0].Function != "work" {
		t.Fatalf("the child's leaf symbolized as %+v, want work", leaf.Frames)
	}
}

func closedContext() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// TestRunStopsWhenCommandExits drains on the interval and stops when the
// exited channel closes, with a final drain.
func TestRunStopsWhenCommandExits(t *testing.T) {
	c, err := New(Options{Frequency: 99, ProcRoot: t.TempDir(), NoSideband: true, Interval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	src := &slowSource{fakeSource: fakeSource{lost: 7}}
	exited := make(chan struct{})
	src.onRead = func(n int) {
		src.add(42, uint64(n), 0x1234)
		if n == 5 {
			close(exited)
		}
	}
	prof, st, err := c.Run(context.Background(), src, exited)
	if err != nil {
		t.Fatal(err)
	}
	if st.Samples < 5 || prof.Lost != 7 || st.Lost != 7 || len(prof.Samples) != 1 || prof.Samples[0].Count != int64(st.Samples) {
		t.Fatalf("stats %+v, profile lost %d with %d samples", st, prof.Lost, len(prof.Samples))
	}
	if prof.Samples[0].Stack[0].Mapping.Kind != stacks.Unknown {
		t.Errorf("an address of an unreadable process is not in the unknown mapping")
	}
}

// slowSource calls onRead before each Read, to produce samples over time.
type slowSource struct {
	fakeSource
	reads  int
	onRead func(n int)
}

func (s *slowSource) Read(fn func(*Sample)) (int, error) {
	s.reads++
	s.onRead(s.reads)
	return s.fakeSource.Read(fn)
}

// failingSource returns one sample and then an error, as the sampler does
// on a malformed record.
type failingSource struct{ fakeSource }

func (s *failingSource) Read(fn func(*Sample)) (int, error) {
	n, _ := s.fakeSource.Read(fn)
	return n, errors.New("malformed record")
}

// TestRunSurvivesReadErrors: a bad record is counted, the samples read
// before it are kept, and the recording goes on.
func TestRunSurvivesReadErrors(t *testing.T) {
	c, err := New(Options{Frequency: 99, ProcRoot: t.TempDir(), NoSideband: true})
	if err != nil {
		t.Fatal(err)
	}
	src := &failingSource{}
	src.add(42, 1, 0x1234)
	prof, st, err := c.Run(closedContext(), src, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(prof.Samples) != 1 || st.Errors != 1 || st.Err == nil {
		t.Fatalf("%d samples, stats %+v; want the sample and 1 error", len(prof.Samples), st)
	}
}

// stoppingSource is a Stopper that produces a sample at every read until
// it is stopped, as the sampler does at high rates. Run stops it from a
// goroutine of its own.
type stoppingSource struct {
	mu sync.Mutex
	fakeSource
	reads, readsAtStop int
	stopped            bool
}

func (s *stoppingSource) Read(fn func(*Sample)) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	if !s.stopped {
		s.add(42, uint64(s.reads), 0x1234)
	}
	return s.fakeSource.Read(fn)
}

func (s *stoppingSource) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return errors.New("stopped twice")
	}
	s.stopped, s.readsAtStop = true, s.reads
	return nil
}

// TestRunStopsSourceBeforeLastDrain: at the recording's end Run stops a
// Stopper once and then reads it once more, which gets what was sent
// before the stop and nothing after.
func TestRunStopsSourceBeforeLastDrain(t *testing.T) {
	c, err := New(Options{Frequency: 99, ProcRoot: t.TempDir(), NoSideband: true, Interval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	src := &stoppingSource{}
	_, st, err := c.Run(ctx, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !src.stopped || src.reads <= src.readsAtStop || st.Samples != uint64(src.readsAtStop) || st.Errors != 0 {
		t.Fatalf("stopped %v after %d of %d reads, %d samples, stats %+v; want stopped, then a last read that adds nothing",
			src.stopped, src.readsAtStop, src.reads, st.Samples, st)
	}
}

// drainingSource's first Read lasts until the source is stopped and an
// hour after: a drain on a host where samples come faster than they are
// aggregated. Its one caller runs it in a synctest bubble, whose clock
// is fake: the hour passes at once, when every goroutine waits.
type drainingSource struct {
	fakeSource
	reading, stopped chan struct{}
	reads            int
}

func (s *drainingSource) Read(fn func(*Sample)) (int, error) {
	if s.reads++; s.reads == 1 {
		s.add(42, 1, 0x1234)
		close(s.reading)
		<-s.stopped
		time.Sleep(time.Hour)
	}
	return s.fakeSource.Read(fn)
}

func (s *drainingSource) Stop() error {
	close(s.stopped) // a second Stop panics
	return nil
}

// TestRunStopsSourceWhileDraining: the recording's end stops the source at
// once, not when the drain under way ends (sprof record -F 50000 on a
// loaded 2-CPU VM sampled for 25 s with -d 3s), and the recording lasts
// until then, not until the drains are over. Without the stop mid-drain
// every goroutine of the bubble blocks and synctest fails the test.
func TestRunStopsSourceWhileDraining(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, err := New(Options{Frequency: 99, ProcRoot: t.TempDir(), NoSideband: true, Interval: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		src := &drainingSource{reading: make(chan struct{}), stopped: make(chan struct{})}
		go func() { // the recording ends 3 s (of the bubble's clock) into the first drain
			<-src.reading
			time.Sleep(3 * time.Second)
			cancel()
		}()
		_, st, err := c.Run(ctx, src, nil)
		if err != nil {
			t.Fatal(err)
		}
		if st.Samples != 1 || src.reads < 2 || st.Duration < 3*time.Second || st.Duration >= time.Hour {
			t.Fatalf("%d samples in %d reads, recorded %v; want 1 in 2 or more, 3s up to the stop", st.Samples, src.reads, st.Duration)
		}
	})
}
