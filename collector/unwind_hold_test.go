package collector

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sprof/sprof/cbf"
	"github.com/sprof/sprof/cbf/recording"
	"github.com/sprof/sprof/sframe"
	"github.com/sprof/sprof/stacks"
	"github.com/sprof/sprof/unwind"
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
		u.builds = unwind.NewBuilder[*unwindInfo](func(io.ReaderAt, string, bool) (*sframe.Table, unwind.Method, error, error) {
			f.calls.Add(1)
			<-f.release
			return table, unwind.MethodEHFrame, nil, nil
		}, nil)
		t.Cleanup(f.finish)
	}
	c.table.newImage(pidLib, set)
	c.table.newImage(pidProg, c.table.newSet(set.maps[:1], nil))
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
		f.sample(pid, from+i, stack)
	}
}

// sample queues one sample of pid at time t with stack bytes stack.
func (f *holdFixture) sample(pid uint32, t uint64, stack []byte) {
	f.src.add(pid, t, f.regs.PC)
	s := &f.src.samples[len(f.src.samples)-1]
	s.PC, s.SP, s.StackCopy = f.regs.PC, f.regs.SP, stack
}

// built waits until the fake build is over and its table can be taken.
func (f *holdFixture) built(t *testing.T) {
	t.Helper()
	f.finish()
	if !f.c.unw.builds.Wait(10 * time.Second) {
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

// readerSink reads what a Sink is told as a recording's reader does:
// process records go to a recording.ProcessTable, and each sample is
// described with the image map that applies at its time, both when it
// arrives (as sprof report reads a file) and at the end.
type readerSink struct {
	procs   *recording.ProcessTable
	epoch   time.Time
	samples []readSample
	arrived []string // each sample described when it arrived
}

type readSample struct {
	t        time.Duration
	pid, tid uint32
	user     []uint64
}

// newReaderFixture returns a hold fixture whose Sink is a readerSink
// that takes sample times for offsets from its epoch.
func newReaderFixture(t *testing.T, slow bool) (*holdFixture, *readerSink) {
	r := &readerSink{procs: recording.NewProcessTable(), epoch: time.Unix(1_700_000_000, 0)}
	f := newHoldFixture(t, r, slow)
	f.c.sink.wall, f.c.sink.mono = r.epoch, 0
	return f, r
}

func (r *readerSink) Process(t time.Time, pid uint32, comm, container string, maps []Mapping) error {
	var images []cbf.Image
	for _, m := range maps {
		images = append(images, cbf.Image{Path: m.Path, Base: m.Start, EndOfText: m.Limit, TextOffset: m.Offset})
	}
	im, err := cbf.NewImageMap("", cbf.Word64, images)
	if err != nil {
		return err
	}
	r.procs.Add([]recording.Process{{Time: t.Sub(r.epoch), PID: pid, Comm: comm, Map: im}})
	return nil
}

func (r *readerSink) Exit(t time.Time, pid uint32) error {
	r.procs.Add([]recording.Process{{Time: t.Sub(r.epoch), PID: pid, Exited: true}})
	return nil
}

func (r *readerSink) Sample(t time.Time, pid, tid, cpu uint32, comm string, user, kernel []uint64, userTruncated bool) error {
	s := readSample{t: t.Sub(r.epoch), pid: pid, tid: tid, user: slices.Clone(user)}
	r.samples = append(r.samples, s)
	r.arrived = append(r.arrived, r.describe(&s))
	return nil
}

func (r *readerSink) OffCPU(t time.Time, pid, tid, cpu uint32, comm string, user, kernel []uint64, userTruncated bool, ns uint64) error {
	return r.Sample(t, pid, tid, cpu, comm, user, kernel, userTruncated)
}

func (r *readerSink) Tick() error { return nil }

// describe says what a sample is: its time, process, stack, and the images
// of the map that applies to it.
func (r *readerSink) describe(s *readSample) string {
	line := fmt.Sprintf("%4dns pid %d/%d %x in", s.t, s.pid, s.tid, s.user)
	if m := r.procs.Map(s.pid, s.t); m != nil {
		for _, im := range m.Images() {
			line += fmt.Sprintf(" %s@%#x", im.Path, im.Base)
		}
	}
	return line
}

// read describes every sample, in time order, with the maps that apply
// once everything is read.
func (r *readerSink) read() []string {
	var out []string
	for i := range r.samples {
		out = append(out, r.describe(&r.samples[i]))
	}
	slices.Sort(out)
	return out
}

// TestHoldSinkAtOnce: with a Sink, a sample held back for its table does
// not hold up the others: they, an exit and a reused pid's new process
// reach the Sink at once, and the held ones follow once the table is
// built, unwound in full. A reader of what the Sink was told, in that
// order, gets every sample under the same maps and with the same stack as
// with the table built beforehand, in time order.
func TestHoldSinkAtOnce(t *testing.T) {
	run := func(f *holdFixture, between func()) {
		t.Helper()
		f.sample(pidLib, 0, f.zeros) // pidLib is reported before its samples are held
		f.add(1, 10)
		if err := f.c.Drain(f.src); err != nil {
			t.Fatal(err)
		}
		// pidLib exits; pid reuse: a fork of pidProg gets its pid.
		f.add(11, 4)
		f.c.events = []event{
			{time: 14, kind: eventExit, pid: pidLib, tid: pidLib},
			{time: 16, kind: eventFork, pid: pidLib, tid: pidLib, ppid: pidProg},
		}
		f.sample(pidLib, 17, f.stack)
		f.sample(pidProg, 18, f.zeros)
		f.sample(pidLib, 19, f.stack)
		if err := f.c.Drain(f.src); err != nil {
			t.Fatal(err)
		}
		between()
		if err := f.c.Drain(f.src); err != nil {
			t.Fatal(err)
		}
	}
	ref, refSink := newReaderFixture(t, false)
	run(ref, func() {})
	want := refSink.read()
	if !slices.IsSorted(refSink.arrived) {
		t.Errorf("with the table built beforehand, samples reached the Sink out of order:\n%s", strings.Join(refSink.arrived, "\n"))
	}

	f, sink := newReaderFixture(t, true)
	run(f, func() {
		// Held: pidLib's samples 1…13 through the library.
		if st := f.c.UnwindStats(); st.Held != 7 || len(sink.samples) != len(want)-7 {
			t.Errorf("while the table is built: %d samples held, %d of %d reached the Sink; want 7 held and the other %d there",
				st.Held, len(sink.samples), len(want), len(want)-7)
		}
		f.built(t)
	})
	if st := f.c.UnwindStats(); st.Released != 7 {
		t.Errorf("%d held samples released with the table, want 7", st.Released)
	}
	if slices.IsSorted(sink.arrived) {
		t.Errorf("the held samples reached the Sink in time order, not after later ones")
	}
	sameSamples(t, sink, want)
}

// TestHoldSinkNewMappings: a held sample taken just after its process
// mapped the library (a dlopen) comes after a later sample that reported
// the new mappings; it still reads under them, not under those before.
func TestHoldSinkNewMappings(t *testing.T) {
	run := func(f *holdFixture, between func()) {
		t.Helper()
		img := f.c.table.byPid[pidLib]
		full := img.maps
		img.maps = f.c.table.newSet(full.maps[:1], nil) // before the dlopen
		f.sample(pidLib, 0, f.zeros)
		if err := f.c.Drain(f.src); err != nil {
			t.Fatal(err)
		}
		img.maps = full // the library mapped between drains
		f.sample(pidLib, 5, f.stack)
		f.sample(pidLib, 6, f.zeros)
		if err := f.c.Drain(f.src); err != nil {
			t.Fatal(err)
		}
		between()
		if err := f.c.Drain(f.src); err != nil {
			t.Fatal(err)
		}
	}
	ref, refSink := newReaderFixture(t, false)
	run(ref, func() {})
	want := refSink.read()

	f, sink := newReaderFixture(t, true)
	run(f, func() { f.built(t) })
	if st := f.c.UnwindStats(); st.Held != 1 || st.Released != 1 || slices.IsSorted(sink.arrived) {
		t.Errorf("%d held, %d released; samples arrived\n%s\nwant 1 held and released after the sample at 6 ns",
			st.Held, st.Released, strings.Join(sink.arrived, "\n"))
	}
	sameSamples(t, sink, want)
}

// sameSamples checks that the samples the Sink got, read as each arrived
// and read at the end, are want (as with the tables built beforehand),
// whatever order they arrived in.
func sameSamples(t *testing.T, sink *readerSink, want []string) {
	t.Helper()
	got := slices.Clone(sink.arrived)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("samples as read on arrival:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := sink.read(); !slices.Equal(got, want) {
		t.Errorf("samples as read at the end:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestHoldSinkAge: with a Sink, a sample is held at most maxHoldAge, then
// flushed with the tables there are, even if its table is never built.
func TestHoldSinkAge(t *testing.T) {
	sink := &logSink{}
	f := newHoldFixture(t, sink, true)
	// The test's clock: a sample's age is what the test says it is,
	// however long a loaded host takes between drains.
	now := uint64(time.Hour)
	f.c.unw.clock = func() uint64 { return now }
	f.add(1, 10)
	if err := f.c.Drain(f.src); err != nil {
		t.Fatal(err)
	}
	now += uint64(maxHoldAge)                // just not older than maxHoldAge
	if err := f.c.Drain(f.src); err != nil { // too early to flush
		t.Fatal(err)
	}
	if st := f.c.UnwindStats(); st.Held != 5 || st.FlushedAge != 0 || len(f.c.unw.held) != 5 {
		t.Fatalf("%d held, %d flushed for their age, %d still held; want 5, 0, 5", st.Held, st.FlushedAge, len(f.c.unw.held))
	}
	now++
	if err := f.c.Drain(f.src); err != nil {
		t.Fatal(err)
	}
	if st := f.c.UnwindStats(); st.FlushedAge != 5 || len(f.c.unw.held) != 0 || st.Building != 1 {
		t.Errorf("after maxHoldAge: %d flushed for their age, %d still held, %d tables building; want 5, 0, 1",
			st.FlushedAge, len(f.c.unw.held), st.Building)
	}
	n := 0
	for _, l := range sink.log {
		if strings.Contains(l, "sample 100/") {
			n++
		}
	}
	if n != 5 {
		t.Errorf("%d samples of pid %d reached the Sink, want 5:\n%s", n, pidLib, strings.Join(sink.log, "\n"))
	}
}

// TestHoldFlush: held-back samples are never lost. The end (a Profile,
// after waiting for the build a while) and a full queue unwind them
// without the table — here up to the library — and count them.
func TestHoldFlush(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flush func(f *holdFixture) *stacks.Profile
		count func(st *UnwindStats) uint64
	}{
		{"end", func(f *holdFixture) *stacks.Profile {
			f.c.unw.finalWait = 10 * time.Millisecond
			return f.c.Profile()
		}, func(st *UnwindStats) uint64 { return st.FlushedEnd }},
		{"queue full", func(f *holdFixture) *stacks.Profile {
			f.c.unw.maxHeld = 3 * len(f.stack)
			f.add(11, 10)
			f.c.Drain(f.src)
			f.c.unw.finalWait = 10 * time.Millisecond
			return f.c.Profile()
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
				held -= st.FlushedEnd
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
					if !s.Truncated {
						t.Errorf("flushed sample's partial stack %v is not marked truncated", s.Stack)
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

// TestHoldAcrossCut: an interval cut while samples wait for a table
// leaves them held; they are counted, whole, in the interval under way
// when the table is there, and none is lost or flushed.
func TestHoldAcrossCut(t *testing.T) {
	f := newHoldFixture(t, nil, true)
	f.add(1, 10)
	if err := f.c.Drain(f.src); err != nil {
		t.Fatal(err)
	}
	first, _ := f.c.Cut(f.src)
	held := f.c.UnwindStats().Held
	if held == 0 || len(f.c.unw.held) != int(held) {
		t.Fatalf("%d samples held, %d still held after the cut; want all still held", held, len(f.c.unw.held))
	}
	for _, s := range first.Samples {
		if s.Pid == pidLib {
			t.Errorf("the cut interval has a sample through the library, whose table is not built: %v", s.Stack)
		}
	}
	f.built(t)
	second, _ := f.c.Cut(f.src)
	st := f.c.UnwindStats()
	if st.Released != held || st.FlushedFull+st.FlushedAge+st.FlushedEnd != 0 || len(f.c.unw.held) != 0 {
		t.Errorf("%d released, %d flushed, %d still held; want %d, 0, 0", st.Released, st.FlushedFull+st.FlushedAge+st.FlushedEnd, len(f.c.unw.held), held)
	}
	var lib int64
	for _, s := range second.Samples {
		if s.Pid == pidLib {
			lib += s.Count
			if len(s.Stack) <= 2 {
				t.Errorf("released sample's stack %v, want the frames beyond the library too", s.Stack)
			}
		}
	}
	if lib != int64(held) {
		t.Errorf("%d samples through the library in the next interval, want %d", lib, held)
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

// TestHoldReleaseBeforeRead: a held sample let go at the start of a
// drain, before the new records are read, checks the records still to
// apply (changesLater) for its pid: those left by the drain before.
func TestHoldReleaseBeforeRead(t *testing.T) {
	f := newHoldFixture(t, nil, true)
	f.add(1, 2)
	f.c.events = []event{
		{time: 0, kind: eventExit, pid: 301, tid: 301},
		{time: 0, kind: eventExit, pid: 302, tid: 302},
		{time: 1 << 62, kind: eventExit, pid: 303, tid: 303}, // after this drain
	}
	if err := f.c.Drain(f.src); err != nil {
		t.Fatal(err)
	}
	// The library's mapping gone from the set: the released sample's
	// return address into it is in no mapping, so aggregate asks
	// whether the process is stable before rereading its mappings.
	set := f.c.table.byPid[pidLib].maps
	set.maps = set.maps[:1]
	f.built(t)
	if err := f.c.Drain(f.src); err != nil {
		t.Fatal(err)
	}
	if st := f.c.UnwindStats(); st.Held != 1 || st.Released != 1 || f.aggregated(pidLib) != 1 {
		t.Errorf("%d held, %d released, %d aggregated; want 1, 1, 1", st.Held, st.Released, f.aggregated(pidLib))
	}
}
