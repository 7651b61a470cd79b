package collector

import (
	"context"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sprof/sprof/internal/elfx"
	"github.com/sprof/sprof/sframe"
	"github.com/sprof/sprof/unwind"
)

// tableSource is a fakeSource that records what a TableLoader is told.
// With room set, it holds that many tables, evicting the one loaded first
// to make room, as the sampler evicts the one used least recently. The
// load of table refuse evicts as any other, then fails, as the sampler's
// does when writing the table into its maps fails.
type tableSource struct {
	fakeSource
	calls []string
	// described holds the pids MapProcess was given, apart from calls,
	// whose order the tests check.
	described []uint32
	loaded    map[uint64]*sframe.Table
	order     []uint64
	room      int
	refuse    uint64
	evicted   []uint64
}

// fakeKernelTable is tableSource's kernel form of a table: the table
// itself, encoded as an SFrame section after its address.
type fakeKernelTable struct{ t *sframe.Table }

func (k fakeKernelTable) MarshalBinary() ([]byte, error) {
	section, err := k.t.Encode(sframe.Version3, k.t.Addr)
	if err != nil {
		return nil, err
	}
	return append(binary.LittleEndian.AppendUint64(nil, k.t.Addr), section...), nil
}

func (s *tableSource) ConvertTable(t *sframe.Table) (KernelTable, error) {
	return fakeKernelTable{t}, nil
}

func (s *tableSource) ParseTable(b []byte) (KernelTable, error) {
	if len(b) < 8 {
		return nil, fmt.Errorf("%d bytes", len(b))
	}
	t, err := sframe.Parse(b[8:], binary.LittleEndian.Uint64(b))
	if err != nil {
		return nil, err
	}
	return fakeKernelTable{t}, nil
}

func (s *tableSource) LoadTable(id uint64, k KernelTable) error {
	t := k.(fakeKernelTable).t
	if s.loaded == nil {
		s.loaded = map[uint64]*sframe.Table{}
	}
	if s.room > 0 && len(s.order) == s.room {
		s.calls = append(s.calls, fmt.Sprintf("evict %d", s.order[0]))
		s.evicted = append(s.evicted, s.order[0])
		delete(s.loaded, s.order[0])
		s.order = s.order[1:]
	}
	if id == s.refuse {
		s.calls = append(s.calls, fmt.Sprintf("refuse %d", id))
		return fmt.Errorf("table %d: cannot write into the maps", id)
	}
	s.loaded[id] = t
	s.order = append(s.order, id)
	s.calls = append(s.calls, fmt.Sprintf("load %d", id))
	return nil
}

func (s *tableSource) Evicted() []uint64 {
	e := s.evicted
	s.evicted = nil
	return e
}

func (s *tableSource) MapTable(pid uint32, id uint64, start, end, bias uint64) error {
	s.calls = append(s.calls, fmt.Sprintf("map %d %#x-%#x table %d bias %#x", pid, start, end, id, bias))
	return nil
}

func (s *tableSource) MapFramePointers(pid uint32, start, end uint64) error {
	s.calls = append(s.calls, fmt.Sprintf("fp %d %#x-%#x", pid, start, end))
	return nil
}

func (s *tableSource) MapJIT(pid uint32, start, end uint64) error {
	s.calls = append(s.calls, fmt.Sprintf("jit %d %#x-%#x", pid, start, end))
	return nil
}

func (s *tableSource) MapProcess(pid uint32) error {
	s.described = append(s.described, pid)
	return nil
}

func (s *tableSource) UnmapPid(pid uint32) { s.calls = append(s.calls, fmt.Sprintf("unmap %d", pid)) }

func (s *tableSource) TableStats() (KernelTableStats, error) { return KernelTableStats{}, nil }

// gatedBuilds has c build tables, storing none, only once release is
// called; the test's end releases them before c closes (Close waits for
// the build under way) where c's Close was set to run at the end first.
func gatedBuilds(t *testing.T, c *Collector) (release func()) {
	gate := make(chan struct{})
	release = sync.OnceFunc(func() { close(gate) })
	t.Cleanup(release)
	c.unw.builds = unwind.NewBuilder[*unwindInfo](func(r io.ReaderAt, name string, hasSFrame bool) (*sframe.Table, unwind.Method, error, error) {
		<-gate
		return unwind.BuildTable(r, name, hasSFrame)
	}, nil)
	return release
}

// TestKernelTables: with Options.KernelTables and given pids, the
// collector describes a followed process's mappings to the loader: the Go
// test binary as frame-pointer code at once, the C fixture by its table
// once built (asked for at once, not at a sample) with the fixture's load
// bias; an exec that replaces a described mapping has the process
// described again from scratch, and its exit forgets it. The build waits
// for the test to let it go: a drain installs the tables finished before
// it looks, the one it asked for among them if the builder was that quick.
func TestKernelTables(t *testing.T) {
	fixture, err := filepath.Abs("../testdata/unwind/spin-ehframe")
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	proc := newFakeProc(t)
	proc.set(500, 1, 0x400000, 0x500000, self)
	proc.addMapping(500, 0x7f0000000000, 0x7f0000001000, fixture)
	c, err := New(Options{Frequency: 100, ProcRoot: proc.root, NoSideband: true, Pids: []uint32{500}, KernelTables: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	build := gatedBuilds(t, c)
	src := &tableSource{}
	if err := c.Drain(src); err != nil {
		t.Fatal(err)
	}
	if want := []string{"fp 500 0x400000-0x500000"}; !slices.Equal(src.calls, want) {
		t.Fatalf("before the fixture's table is built: %q, want %q", src.calls, want)
	}
	// Described, though a mapping waits for its table: the walk stops
	// there as at any pc without one, and need not wake the reader.
	if want := []uint32{500}; !slices.Equal(src.described, want) {
		t.Fatalf("described pids %v, want %v", src.described, want)
	}
	build()
	if !c.unw.builds.Wait(30 * time.Second) {
		t.Fatal("the fixture's table was not built in 30 s")
	}
	if err := c.Drain(src); err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(fixture)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	bias := elfx.LoadSegments(f).Bias(0x7f0000000000, 0)
	want := []string{"fp 500 0x400000-0x500000", "load 1", fmt.Sprintf("map 500 0x7f0000000000-0x7f0000001000 table 1 bias %#x", bias)}
	if !slices.Equal(src.calls, want) {
		t.Fatalf("once built: %q, want %q", src.calls, want)
	}
	if st := src.loaded[1]; st == nil || len(st.FDEs()) == 0 {
		t.Fatalf("loaded table %v has no functions", st)
	}
	if st := c.UnwindStats(); st.KernelTables != 1 || st.KernelErrors != 0 {
		t.Errorf("stats: %d tables loaded, %d errors (%v); want 1, 0", st.KernelTables, st.KernelErrors, st.KernelErr)
	}

	src.calls = nil
	proc.set(500, 1, 0x400000, 0x500000, fixture) // what /proc shows after the exec
	c.events = []event{
		{time: 10, kind: eventExec, pid: 500},
		mmapEvent(11, 500, 0x400000, 0x500000, 0, fixture, nil),
	}
	if err := c.Drain(src); err != nil {
		t.Fatal(err)
	}
	src.add(500, 12, 0x400100)
	if err := c.Drain(src); err != nil {
		t.Fatal(err)
	}
	bias = elfx.LoadSegments(f).Bias(0x400000, 0)
	want = []string{fmt.Sprintf("map 500 0x400000-0x500000 table 1 bias %#x", bias), "unmap 500",
		fmt.Sprintf("map 500 0x400000-0x500000 table 1 bias %#x", bias)}
	if !slices.Equal(src.calls, want) {
		t.Fatalf("after exec: %q, want %q", src.calls, want)
	}

	src.calls = nil
	c.events = []event{{time: 20, kind: eventExit, pid: 500, tid: 500}}
	if err := c.Drain(src); err != nil {
		t.Fatal(err)
	}
	if want := []string{"unmap 500"}; !slices.Equal(src.calls, want) {
		t.Fatalf("after exit: %q, want %q", src.calls, want)
	}
}

// TestKernelTablesJIT: executable memory of no file, a JIT compiler's
// code, is described to the kernel as such, once; more of it mapped later
// is described as it is mapped, without describing the process again;
// after an exec, which leaves none, the process is described again
// without it.
func TestKernelTablesJIT(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	proc := newFakeProc(t)
	proc.set(500, 1, 0x400000, 0x500000, self)
	proc.addMapping(500, 0x7f0000000000, 0x7f0000010000, "")
	c, err := New(Options{Frequency: 100, ProcRoot: proc.root, NoSideband: true, Pids: []uint32{500}, KernelTables: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	src := &tableSource{}
	drain := func(step string, want ...string) {
		t.Helper()
		if err := c.Drain(src); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(src.calls, want) {
			t.Fatalf("%s: %q, want %q", step, src.calls, want)
		}
		src.calls = nil
	}
	drain("at start", "fp 500 0x400000-0x500000", "jit 500 0x7f0000000000-0x7f0000010000")
	src.add(500, 5, 0x7f0000000100)
	drain("unchanged")
	// Described as it is mapped, before any sample needs it.
	c.events = []event{{time: 10, kind: eventMmap, pid: 500, m: mapping{start: 0x7f0000020000, limit: 0x7f0000030000}, anon: true}}
	drain("more JIT code", "jit 500 0x7f0000020000-0x7f0000030000")
	// The gap between them mapped: described, the others not again.
	c.events = []event{{time: 11, kind: eventMmap, pid: 500, m: mapping{start: 0x7f0000010000, limit: 0x7f0000020000}, anon: true}}
	drain("the gap between them mapped", "jit 500 0x7f0000010000-0x7f0000020000")
	proc.set(500, 1, 0x400000, 0x500000, self) // what /proc shows after the exec
	c.events = []event{
		{time: 20, kind: eventExec, pid: 500},
		mmapEvent(21, 500, 0x400000, 0x500000, 0, self, nil),
	}
	src.add(500, 22, 0x400100)
	drain("after exec", "unmap 500", "fp 500 0x400000-0x500000")
}

// TestKernelTablesFromStore: a table loaded into the kernel leaves its
// kernel form in the unwind store, and the next collector on that store
// loads it from there as soon as a followed process maps the binary,
// before the table itself is read or built (the builder here never
// finishes). A damaged kernel form is counted, and the mapping waits for
// the table as if none were stored.
func TestKernelTablesFromStore(t *testing.T) {
	fixture, err := filepath.Abs("../testdata/unwind/spin-ehframe")
	if err != nil {
		t.Fatal(err)
	}
	store, err := unwind.OpenStore(t.TempDir(), "test")
	if err != nil {
		t.Fatal(err)
	}
	proc := newFakeProc(t)
	proc.set(500, 1, 0x400000, 0x500000, fixture)
	// open returns a collector whose builds wait for release.
	open := func() (c *Collector, release func()) {
		c, err := New(Options{Frequency: 100, ProcRoot: proc.root, NoSideband: true, Pids: []uint32{500}, KernelTables: true, UnwindStore: store})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		// The tables themselves are not stored: only their kernel form
		// is there.
		return c, gatedBuilds(t, c)
	}
	first, release := open()
	src := &tableSource{}
	if err := first.Drain(src); err != nil {
		t.Fatal(err)
	}
	release()
	if !first.unw.builds.Wait(30 * time.Second) {
		t.Fatal("the fixture's table was not built in 30 s")
	}
	if err := first.Drain(src); err != nil {
		t.Fatal(err)
	}
	in := first.unw.byFile[first.table.byPid[500].maps.find(0x400000).bin]
	if in.kernelID == 0 {
		t.Fatalf("the fixture's table is not loaded: %q", src.calls)
	}
	if _, err := store.LoadDerived(in.buildID, in.hasSFrame, KernelForm); err != nil {
		t.Fatalf("the kernel form was not stored: %v", err)
	}

	second, _ := open() // never built
	src = &tableSource{}
	if err := second.Drain(src); err != nil {
		t.Fatal(err)
	}
	if want := []string{"load 1", "map 500 0x400000-0x500000 table 1"}; !slices.Equal(tableCalls(src.calls), want) {
		t.Errorf("from the store: %q, want %q", src.calls, want)
	}
	if st := second.UnwindStats(); st.KernelStored != 1 || st.KernelTables != 1 || st.StoreErrors != 0 {
		t.Errorf("stats: %d loaded from the store of %d, %d store errors (%v); want 1 of 1, 0", st.KernelStored, st.KernelTables, st.StoreErrors, st.StoreErr)
	}

	if err := store.SaveDerived(in.buildID, in.hasSFrame, KernelForm, []byte("damaged")); err != nil {
		t.Fatal(err)
	}
	third, _ := open()
	src = &tableSource{}
	if err := third.Drain(src); err != nil {
		t.Fatal(err)
	}
	if len(src.calls) != 0 {
		t.Errorf("with a damaged kernel form: %q, want nothing before the table is built", src.calls)
	}
	if st := third.UnwindStats(); st.StoreErrors != 1 || st.KernelStored != 0 {
		t.Errorf("stats: %d store errors, %d loaded from the store; want 1, 0", st.StoreErrors, st.KernelStored)
	}
}

// TestKernelDemandFromStore: following no process in particular, the
// collector loads a binary's table when a sample needs it (here a walk
// that ended in it), and takes it from the store's kernel form when there
// is one, before the table itself is built (the builder here never
// finishes).
func TestKernelDemandFromStore(t *testing.T) {
	fixture, err := filepath.Abs("../testdata/unwind/spin-ehframe")
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(fixture)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	table, _, _, err := unwind.BuildTable(f, fixture, false)
	if err != nil {
		t.Fatal(err)
	}
	form, err := fakeKernelTable{table}.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	store, err := unwind.OpenStore(t.TempDir(), "test")
	if err != nil {
		t.Fatal(err)
	}
	if err := store.SaveDerived(hex.EncodeToString(buildIDBytes(t, fixture)), false, KernelForm, form); err != nil {
		t.Fatal(err)
	}
	proc := newFakeProc(t)
	proc.set(500, 1, 0x400000, 0x500000, fixture)
	c, err := New(Options{Frequency: 100, ProcRoot: proc.root, NoSideband: true, KernelTables: true, UnwindStore: store})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	gatedBuilds(t, c)
	src := &tableSource{}
	if err := c.Drain(src); err != nil {
		t.Fatal(err)
	}
	if len(src.calls) != 0 {
		t.Fatalf("before a sample needs the table: %q, want nothing", src.calls)
	}
	src.walked(500, 20, 0x400100)
	if err := c.Drain(src); err != nil {
		t.Fatal(err)
	}
	if want := []string{"load 1", "map 500 0x400000-0x500000 table 1"}; !slices.Equal(tableCalls(src.calls), want) {
		t.Errorf("after a walk that ended in the binary: %q, want %q", src.calls, want)
	}
	if st := c.UnwindStats(); st.KernelStored != 1 {
		t.Errorf("%d tables loaded from the store, want 1", st.KernelStored)
	}
}

// loadSignal is a tableSource that signals each table load.
type loadSignal struct {
	tableSource
	loads chan uint64
}

func (s *loadSignal) LoadTable(id uint64, t KernelTable) error {
	err := s.tableSource.LoadTable(id, t)
	s.loads <- id
	return err
}

// TestRunIntervalTakesBuiltTables: RunInterval drains when a table is
// built, and loads it into the kernel then, not at its next interval
// (an hour here): until a new binary's table is in the kernel, its
// frames end the kernel's walks.
func TestRunIntervalTakesBuiltTables(t *testing.T) {
	fixture, err := filepath.Abs("../testdata/unwind/spin-ehframe")
	if err != nil {
		t.Fatal(err)
	}
	proc := newFakeProc(t)
	proc.set(500, 1, 0x400000, 0x500000, fixture)
	c, err := New(Options{Frequency: 100, ProcRoot: proc.root, NoSideband: true, Pids: []uint32{500},
		KernelTables: true, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	build := gatedBuilds(t, c) // RunInterval closes c
	src := &loadSignal{loads: make(chan uint64, 1)}
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() {
		_, _, err := c.RunInterval(ctx, src, nil) // attaches src: the build is asked for
		ran <- err
	}()
	build()
	select {
	case id := <-src.loads:
		if id != 1 {
			t.Errorf("loaded table %d, want 1", id)
		}
	case <-time.After(30 * time.Second):
		t.Error("the table built was not loaded in 30 s, with an interval of an hour")
	}
	stop()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
}

// walked queues a sample of pid at time whose user stack the kernel
// walked over tables from pc and did not finish.
func (s *tableSource) walked(pid uint32, time, pc uint64) {
	var comm [16]byte
	copy(comm[:], fmt.Sprint("p", pid))
	s.samples = append(s.samples, Sample{Time: time, Pid: pid, Tid: pid, Comm: comm, User: []uint64{pc},
		UserTables: true, UserTruncated: true})
}

// tableCalls returns calls with the bias left out of each "map" call.
func tableCalls(calls []string) []string {
	out := make([]string, len(calls))
	for i, c := range calls {
		out[i], _, _ = strings.Cut(c, " bias ")
	}
	return out
}

// kernelPair is process 500 of a fake /proc, followed with tables in the
// kernel: the Go test binary, then two C fixtures without frame pointers
// at 0x7f0000000000 and 0x7f1000000000, both tables offered to src.
type kernelPair struct {
	proc *fakeProc
	c    *Collector
	src  *tableSource
	// at holds the start of the fixture mapping described by table id,
	// for the tables src loaded; path the fixtures, by start.
	at   map[uint64]uint64
	path map[uint64]string
}

// newKernelPair follows pids (500 among them) and drains until both
// fixtures' tables were offered to src, loaded or refused. Which is
// built first, table 1, is the builder's choice.
func newKernelPair(t *testing.T, src *tableSource, pids ...uint32) *kernelPair {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	k := &kernelPair{proc: newFakeProc(t), src: src, at: map[uint64]uint64{}, path: map[uint64]string{}}
	k.proc.set(500, 1, 0x400000, 0x500000, self)
	for i, lib := range []string{"../testdata/unwind/spin-ehframe", "../testdata/unwind/spin-sframe"} {
		abs, err := filepath.Abs(lib)
		if err != nil {
			t.Fatal(err)
		}
		start := 0x7f0000000000 + uint64(i)<<36
		k.proc.addMapping(500, start, start+0x1000, abs)
		k.path[start] = abs
	}
	k.c, err = New(Options{Frequency: 100, ProcRoot: k.proc.root, NoSideband: true, Pids: pids, KernelTables: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.c.Close() })
	for {
		if err := k.c.Drain(src); err != nil {
			t.Fatal(err)
		}
		if st := k.c.UnwindStats(); st.KernelTables+st.KernelErrors == 2 {
			break
		}
		if !k.c.unw.builds.Wait(30 * time.Second) {
			t.Fatalf("tables not built in 30 s: %q", src.calls)
		}
	}
	for _, call := range src.calls {
		var start, limit, id uint64
		if _, err := fmt.Sscanf(call, "map 500 %v-%v table %d", &start, &limit, &id); err == nil {
			k.at[id] = start
		}
	}
	src.calls = nil
	return k
}

// drain drains once and returns what src was told, without biases.
func (k *kernelPair) drain(t *testing.T) []string {
	t.Helper()
	if err := k.c.Drain(k.src); err != nil {
		t.Fatal(err)
	}
	calls := tableCalls(k.src.calls)
	k.src.calls = nil
	return calls
}

// TestKernelTableReload: when the kernel evicts a binary's table to make
// room for another's, the binary's mappings are no longer described by
// it; a sample whose walk ends in that binary has the table loaded again
// and the process's mapping of it described again, without a rebuild.
func TestKernelTableReload(t *testing.T) {
	k := newKernelPair(t, &tableSource{room: 1}, 500)
	first, ok := k.at[1]
	if !ok || !slices.Contains(k.src.order, 2) || slices.Contains(k.src.order, 1) {
		t.Fatalf("tables %v mapped, %v loaded: want 1 mapped, then evicted for 2", k.at, k.src.order)
	}
	k.src.walked(500, 100, first+0x100)
	want := []string{"evict 2", "load 3", fmt.Sprintf("map 500 %#x-%#x table 3", first, first+0x1000)}
	if calls := k.drain(t); !slices.Equal(calls, want) {
		t.Fatalf("a walk ending in the evicted table's binary: %q, want %q", calls, want)
	}
	if st := k.c.UnwindStats(); st.KernelReloaded != 1 || st.KernelTables != 3 {
		t.Errorf("stats: %d tables reloaded, %d loads; want 1, 3", st.KernelReloaded, st.KernelTables)
	}
}

// TestKernelTableRefusedEvicts: a load the kernel refuses after evicting
// tables to make room still evicted them: their binaries' mappings wait,
// and a walk ending in one has its table loaded again.
func TestKernelTableRefusedEvicts(t *testing.T) {
	k := newKernelPair(t, &tableSource{room: 1, refuse: 2}, 500)
	first, ok := k.at[1]
	if st := k.c.UnwindStats(); !ok || st.KernelTables != 1 || st.KernelErrors != 1 {
		t.Fatalf("tables %v mapped, %d loaded, %d refused: want 1 mapped, then 2 refused", k.at, st.KernelTables, st.KernelErrors)
	}
	k.src.walked(500, 100, first+0x100)
	want := []string{"load 3", fmt.Sprintf("map 500 %#x-%#x table 3", first, first+0x1000)}
	if calls := k.drain(t); !slices.Equal(calls, want) {
		t.Fatalf("a walk ending in the binary whose table a refused load evicted: %q, want %q", calls, want)
	}
}

// TestKernelTableEvictedMappings: the mappings of a binary whose table
// the kernel evicted wait for it, whether described before the eviction
// or mapped after it, and whatever the process's mappings are known by:
// here process 600 is known by its mmap records alone (no fork record,
// no sample yet). Each is described again when the table is loaded again.
func TestKernelTableEvictedMappings(t *testing.T) {
	k := newKernelPair(t, &tableSource{room: 1}, 500, 600)
	x, y := k.at[1], k.at[2] // table 1, x's, was evicted for y's
	if x == 0 || y == 0 {
		t.Fatalf("tables %v mapped: want 1 and 2", k.at)
	}
	const x2, y600 = 0x7f4000000000, 0x7f2000000000
	k.c.events = append(k.c.events,
		mmapEvent(10, 500, x2, x2+0x1000, 0, k.path[x], buildIDBytes(t, k.path[x])),
		mmapEvent(11, 600, y600, y600+0x1000, 0, k.path[y], buildIDBytes(t, k.path[y])))
	want := []string{fmt.Sprintf("map 600 %#x-%#x table 2", y600, y600+0x1000)}
	if calls := k.drain(t); !slices.Equal(calls, want) {
		t.Fatalf("after the mmap records: %q, want %q", calls, want)
	}
	// x's table is loaded again, evicting y's, which 600 maps.
	k.src.walked(500, 20, x+0x100)
	want = []string{"evict 2", "load 3", fmt.Sprintf("map 500 %#x-%#x table 3", x, x+0x1000), fmt.Sprintf("map 500 %#x-%#x table 3", x2, x2+0x1000)}
	if calls := k.drain(t); !slices.Equal(calls, want) {
		t.Fatalf("a walk ending in x: %q, want %q", calls, want)
	}
	k.src.walked(600, 30, y600+0x100)
	calls := k.drain(t)
	want = []string{"evict 3", "load 4", fmt.Sprintf("map 500 %#x-%#x table 4", y, y+0x1000), fmt.Sprintf("map 600 %#x-%#x table 4", y600, y600+0x1000)}
	if len(calls) > 2 {
		slices.Sort(calls[2:]) // the processes' mappings come in no order
	}
	if !slices.Equal(calls, want) {
		t.Fatalf("a walk of 600 ending in y: %q, want %q", calls, want)
	}
	if st := k.c.UnwindStats(); st.KernelReloaded != 2 {
		t.Errorf("%d tables reloaded, want 2", st.KernelReloaded)
	}
}

// buildIDBytes returns the build ID of the file at p, as an mmap record
// carries it.
func buildIDBytes(t *testing.T, p string) []byte {
	b, err := hex.DecodeString(fileBuildID(t, p))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
