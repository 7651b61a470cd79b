package collector

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sprof/sprof/internal/elfx"
	"github.com/sprof/sprof/sframe"
)

// tableSource is a fakeSource that records what a TableLoader is told.
// With room set, it holds that many tables, evicting the one loaded first
// to make room, as the sampler evicts the one used least recently.
type tableSource struct {
	fakeSource
	calls   []string
	loaded  map[uint64]*sframe.Table
	order   []uint64
	room    int
	evicted []uint64
}

func (s *tableSource) LoadTable(id uint64, t *sframe.Table) error {
	if s.loaded == nil {
		s.loaded = map[uint64]*sframe.Table{}
	}
	if s.room > 0 && len(s.order) == s.room {
		s.calls = append(s.calls, fmt.Sprintf("evict %d", s.order[0]))
		s.evicted = append(s.evicted, s.order[0])
		delete(s.loaded, s.order[0])
		s.order = s.order[1:]
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

func (s *tableSource) UnmapPid(pid uint32) { s.calls = append(s.calls, fmt.Sprintf("unmap %d", pid)) }

func (s *tableSource) TableStats() (KernelTableStats, error) { return KernelTableStats{}, nil }

// TestKernelTables: with Options.KernelTables and given pids, the
// collector describes a followed process's mappings to the loader: the Go
// test binary as frame-pointer code at once, the C fixture by its table
// once built (asked for at once, not at a sample) with the fixture's load
// bias; an exec that replaces a described mapping has the process
// described again from scratch, and its exit forgets it.
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
	src := &tableSource{}
	if err := c.Drain(src); err != nil {
		t.Fatal(err)
	}
	if want := []string{"fp 500 0x400000-0x500000"}; !slices.Equal(src.calls, want) {
		t.Fatalf("before the fixture's table is built: %q, want %q", src.calls, want)
	}
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

// TestKernelTableReload: when the kernel evicts a binary's table to make
// room for another's, the binary's mappings are no longer described by
// it; a sample whose walk ends in that binary has the table loaded again
// and the process's mapping of it described again, without a rebuild.
func TestKernelTableReload(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	proc := newFakeProc(t)
	proc.set(500, 1, 0x400000, 0x500000, self)
	for i, lib := range []string{"../testdata/unwind/spin-ehframe", "../testdata/unwind/spin-sframe"} {
		abs, err := filepath.Abs(lib)
		if err != nil {
			t.Fatal(err)
		}
		start := 0x7f0000000000 + uint64(i)<<36
		proc.addMapping(500, start, start+0x1000, abs)
	}
	c, err := New(Options{Frequency: 100, ProcRoot: proc.root, NoSideband: true, Pids: []uint32{500}, KernelTables: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	src := &tableSource{room: 1}
	for c.UnwindStats().KernelTables < 2 {
		if err := c.Drain(src); err != nil {
			t.Fatal(err)
		}
		if c.UnwindStats().KernelTables < 2 && !c.unw.builds.Wait(30*time.Second) {
			t.Fatalf("tables not built in 30 s: %q", src.calls)
		}
	}
	// Table 1 was loaded first and evicted for table 2.
	var first string
	for _, call := range src.calls {
		if strings.HasPrefix(call, "map 500 ") && strings.Contains(call, " table 1 ") {
			first = call
		}
	}
	if first == "" || !slices.Contains(src.calls, "evict 1") {
		t.Fatalf("calls %q: want table 1 mapped, then evicted", src.calls)
	}
	lo, _, _ := strings.Cut(strings.Fields(first)[2], "-")
	start, err := strconv.ParseUint(lo, 0, 64)
	if err != nil {
		t.Fatalf("call %q: %v", first, err)
	}
	src.calls = nil
	var comm [16]byte
	copy(comm[:], "p500")
	src.samples = append(src.samples, Sample{Time: 100, Pid: 500, Tid: 500, Comm: comm, User: []uint64{start + 0x100},
		UserTables: true, UserTruncated: true})
	if err := c.Drain(src); err != nil {
		t.Fatal(err)
	}
	want := []string{"evict 2", "load 3", strings.Replace(first, " table 1 ", " table 3 ", 1)}
	if !slices.Equal(src.calls, want) {
		t.Fatalf("a walk ending in the evicted table's binary: %q, want %q", src.calls, want)
	}
	if st := c.UnwindStats(); st.KernelReloaded != 1 || st.KernelTables != 3 {
		t.Errorf("stats: %d tables reloaded, %d loads; want 1, 3", st.KernelReloaded, st.KernelTables)
	}
}
