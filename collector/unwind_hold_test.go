package collector

import (
	"fmt"
	"io"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sprof/sprof/sframe"
	"github.com/sprof/sprof/stacks"
)

// holdFixture is a collector with two processes: pid 100 runs a program
// whose stacks go through a library, pid 200 the program alone. With a
// slow build, the library's table is built by a fake builder that waits
// until release is closed.
type holdFixture struct {
	c       *Collector
	src     *fakeSource
	release chan struct{}
	calls   atomic.Int32
	regs    sframe.Regs
	stack   []byte
	// zeros is pidProg's stack: the return address 0 ends it.
	zeros []byte
}

const (
	pidLib  = 100 // through the library
	pidProg = 200 // in the program alone
)

func newHoldFixture(t testing.TB, sink Sink, slow bool) *holdFixture {
	t.Helper()
	u, set, cp := benchStack(t, 8)
	c, err := New(Options{Frequency: 99, ProcRoot: t.TempDir(), NoSideband: true, StackCopy: true, Sink: sink})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.unw = u
	f := &holdFixture{c: c, src: &fakeSource{}, release: make(chan struct{}), regs: cp.regs, stack: slices.Clone(u.stack[:cp.n]), zeros: make([]byte, 16)}
	if slow {
		lib := &set.maps[1]
		in := u.info(lib)
		table := in.table
		in.table, in.built = nil, false
		// The builder gets a descriptor of the library; any file does.
		self, err := os.Open(os.Args[0])
		if err != nil {
			t.Fatal(err)
		}
		lib.bin.pinned = self
		t.Cleanup(func() { self.Close() })
		u.builds = newTableBuilder(func(io.ReaderAt, string, bool) (*sframe.Table, Method, error, error) {
			f.calls.Add(1)
			<-f.release
			return table, MethodEHFrame, nil, nil
		})
		t.Cleanup(f.finish)
	}
	c.table.newImage(pidLib, set)
	c.table.newImage(pidProg, &mapSet{maps: set.maps[:1]})
	return f
}

// finish lets the fake build end.
func (f *holdFixture) finish() {
	select {
	case <-f.release:
	default:
		close(f.release)
	}
}

// add queues n samples from time from on, alternating between the two
// processes: pidLib's unwind needs the library's table, pidProg's, a
// single frame in the program, does not.
func (f *holdFixture) add(from uint64, n int) {
	for i := range uint64(n) {
		pid, stack := uint32(pidLib), f.stack
		if (from+i)%2 == 0 {
			pid, stack = pidProg, f.zeros
		}
		f.src.add(pid, from+i, f.regs.PC)
		s := &f.src.samples[len(f.src.samples)-1]
		s.PC, s.SP, s.StackCopy = f.regs.PC, f.regs.SP, stack
	}
}

// built waits until the fake build is over and its table can be taken.
func (f *holdFixture) built(t *testing.T) {
	t.Helper()
	f.finish()
	if !f.c.unw.builds.wait(10 * time.Second) {
		t.Fatal("the build did not end")
	}
}

// aggregated counts the samples of pid aggregated so far.
func (f *holdFixture) aggregated(pid uint32) int {
	n := 0
	for _, e := range f.c.agg.entries {
		if e.pid == pid {
			n += int(e.count)
		}
	}
	return n
}

// profileLines describes a profile's samples, sorted.
func profileLines(p *stacks.Profile) []string {
	var out []string
	for _, s := range p.Samples {
		line := fmt.Sprintf("pid %d ×%d truncated %v:", s.Pid, s.Count, s.Truncated)
		for _, l := range s.Stack {
			line += fmt.Sprintf(" %#x", l.Address)
		}
		out = append(out, line)
	}
	slices.Sort(out)
	return out
}

// TestHoldWhileBuilding: while the library's table is being built, the
// drain goes on: the program's samples are aggregated at once, the
// library's held back and unwound once the table is there, into the same
// profile as with the table built beforehand; one build for all of them.
func TestHoldWhileBuilding(t *testing.T) {
	ref := newHoldFixture(t, nil, false)
	ref.add(1, 20)
	if err := ref.c.Drain(ref.src); err != nil {
		t.Fatal(err)
	}
	want := profileLines(ref.c.Profile())

	f := newHoldFixture(t, nil, true)
	for drain := 1; drain <= 2; drain++ {
		f.add(uint64(10*drain-9), 10)
		if err := f.c.Drain(f.src); err != nil {
			t.Fatal(err)
		}
		st := f.c.UnwindStats()
		if got := f.aggregated(pidProg); got != 5*drain {
			t.Errorf("drain %d: %d samples of the program alone aggregated, want %d", drain, got, 5*drain)
		}
		if got := f.aggregated(pidLib); got != 0 || st.Held != uint64(5*drain) || st.Building != 1 {
			t.Errorf("drain %d: %d samples through the library aggregated, %d held, %d tables building; want 0, %d, 1",
				drain, got, st.Held, st.Building, 5*drain)
		}
	}
	f.built(t)
	if err := f.c.Drain(f.src); err != nil {
		t.Fatal(err)
	}
	st := f.c.UnwindStats()
	if got := f.aggregated(pidLib); got != 10 || st.Released != 10 || len(f.c.unw.held) != 0 || f.c.unw.heldBytes != 0 {
		t.Errorf("after the build: %d samples through the library aggregated, %d released, %d (%d bytes) still held; want 10, 10, 0",
			got, st.Released, len(f.c.unw.held), f.c.unw.heldBytes)
	}
	if n := f.calls.Load(); n != 1 {
		t.Errorf("the table was built %d times, want once", n)
	}
	if got := profileLines(f.c.Profile()); !slices.Equal(got, want) {
		t.Errorf("profile with the table built in the background:\n%s\nwant, as with it built beforehand:\n%s", got, want)
	}
	if rs := ref.c.UnwindStats(); st.Userspace != rs.Userspace || st.BPF != rs.BPF || st.Frames != rs.Frames {
		t.Errorf("%d userspace unwinds, %d BPF walks, frames %v; want %d, %d, %v", st.Userspace, st.BPF, st.Frames, rs.Userspace, rs.BPF, rs.Frames)
	}
}

// TestHoldSinkOrder: with a Sink, held-back samples and those after them
// come out in time order, exactly as with the table built beforehand.
func TestHoldSinkOrder(t *testing.T) {
	refSink := &logSink{}
	ref := newHoldFixture(t, refSink, false)
	ref.add(1, 20)
	ref.c.events = []event{{time: 15, kind: eventExit, pid: pidProg, tid: pidProg}}
	if err := ref.c.Drain(ref.src); err != nil {
		t.Fatal(err)
	}

	sink := &logSink{}
	f := newHoldFixture(t, sink, true)
	f.add(1, 10)
	if err := f.c.Drain(f.src); err != nil {
		t.Fatal(err)
	}
	f.add(11, 10)
	f.c.events = []event{{time: 15, kind: eventExit, pid: pidProg, tid: pidProg}}
	if err := f.c.Drain(f.src); err != nil {
		t.Fatal(err)
	}
	if len(sink.log) != 0 {
		t.Errorf("the Sink was told %q while the first sample waits", sink.log)
	}
	f.built(t)
	if err := f.c.Drain(f.src); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(sink.log, refSink.log) {
		t.Errorf("sink was told\n%q\nwant, as with the table built beforehand,\n%q", sink.log, refSink.log)
	}
}

// TestHoldFlush: held-back samples are never lost. A Cut, the end (a
// Profile, after waiting for the build a while) and a full queue unwind
// them without the table — here up to the library — and count them.
func TestHoldFlush(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flush func(f *holdFixture) *stacks.Profile
		count func(st *UnwindStats) uint64
	}{
		{"cut", func(f *holdFixture) *stacks.Profile { p, _ := f.c.Cut(f.src); return p },
			func(st *UnwindStats) uint64 { return st.FlushedCut }},
		{"end", func(f *holdFixture) *stacks.Profile {
			f.c.unw.finalWait = 10 * time.Millisecond
			return f.c.Profile()
		}, func(st *UnwindStats) uint64 { return st.FlushedEnd }},
		{"queue full", func(f *holdFixture) *stacks.Profile {
			f.c.unw.maxHeld = 3 * len(f.stack)
			f.add(11, 10)
			f.c.Drain(f.src)
			p, _ := f.c.Cut(f.src)
			return p
		}, func(st *UnwindStats) uint64 { return st.FlushedFull }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newHoldFixture(t, nil, true)
			f.add(1, 10)
			if err := f.c.Drain(f.src); err != nil {
				t.Fatal(err)
			}
			p := tc.flush(f)
			st := f.c.UnwindStats()
			held := st.Held
			if tc.name == "queue full" {
				if st.FlushedFull == 0 {
					t.Errorf("no sample flushed from a full queue")
				}
				held -= st.FlushedCut
			}
			if got := tc.count(&st); got != held || st.Released != 0 || len(f.c.unw.held) != 0 {
				t.Errorf("%d flushed, %d released, %d still held; want %d, 0, 0", got, st.Released, len(f.c.unw.held), held)
			}
			var lib int64
			for _, s := range p.Samples {
				if s.Pid == pidLib {
					lib += s.Count
					if len(s.Stack) != 2 || s.Stack[0].Address != f.regs.PC {
						t.Errorf("flushed sample's stack %v, want the program's frame and the return address into the library", s.Stack)
					}
				}
			}
			if want := int64(st.Held); lib != want {
				t.Errorf("%d samples through the library in the profile, want all %d", lib, want)
			}
			if b := findBinary(st, "/lib/libc.so.6"); b == nil || b.Stops["table still being built (sample flushed)"] != st.Held {
				t.Errorf("library's unwind stats %+v, want %d stops for the table being built", b, st.Held)
			}
		})
	}
}

func findBinary(st UnwindStats, name string) *BinaryUnwind {
	for i := range st.Binaries {
		if st.Binaries[i].Name == name {
			return &st.Binaries[i]
		}
	}
	return nil
}
