package collector

import (
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sprof/sprof/collector/perfring"
	"github.com/sprof/sprof/internal/testenv"
	"github.com/sprof/sprof/stacks"
	"github.com/sprof/sprof/symbolize/buildid"
)

func realPath(t testing.TB, p string) string {
	t.Helper()
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func fileBuildID(t testing.TB, p string) string {
	t.Helper()
	id, err := buildid.File(p)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestTableReadsRunningProcess reads a real child's mappings from /proc
// and expects its executable with the build ID readelf would report.
func TestTableReadsRunningProcess(t *testing.T) {
	sleep := realPath(t, "/bin/sleep")
	cmd := exec.Command(sleep, "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := uint32(cmd.Process.Pid)
	tb := newTable("/proc", nil, false, 1)
	var img *image
	var err error
	// The child is sleep only once it has exec'd.
	for range 200 {
		if img, err = tb.load(pid, 0); err == nil && hasFile(img.maps, sleep) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if img.startTime == 0 {
		t.Error("start time not read")
	}
	var found bool
	for _, m := range img.maps.maps {
		if m.bin.name == sleep {
			found = true
			if want := readelfBuildID(t, sleep); m.bin.buildID != want {
				t.Errorf("%s: build ID %q, want %q", sleep, m.bin.buildID, want)
			}
		}
	}
	if !found {
		t.Fatalf("no mapping of %s in %+v", sleep, img.maps.maps)
	}
	if _, err := tb.load(pid, 1); err == nil {
		t.Error("loading an exited process succeeded")
	}
}

// readelfBuildID is the GNU build ID of an ELF file as readelf -n prints
// it: an oracle for the one sprof reads.
func readelfBuildID(t testing.TB, path string) string {
	t.Helper()
	out, err := exec.Command(testenv.RequireTool(t, "readelf"), "-n", path).Output()
	if err != nil {
		t.Fatalf("readelf -n %s: %v", path, err)
	}
	_, rest, ok := strings.Cut(string(out), "Build ID: ")
	if !ok {
		t.Fatalf("readelf -n %s shows no build ID:\n%s", path, out)
	}
	return strings.Fields(rest)[0]
}

func hasFile(s *mapSet, name string) bool {
	for _, m := range s.maps {
		if m.bin.name == name {
			return true
		}
	}
	return false
}

// fakeProc is a directory laid out like /proc for the processes a test
// invents.
type fakeProc struct {
	t    *testing.T
	root string
}

func newFakeProc(t *testing.T) *fakeProc { return &fakeProc{t, t.TempDir()} }

// set makes pid a process started at start that maps file at
// [start, limit) through map_files, as the kernel shows it.
func (f *fakeProc) set(pid uint32, startTime uint64, lo, hi uint64, file string) {
	dir := filepath.Join(f.root, fmt.Sprint(pid))
	os.RemoveAll(dir)
	if err := os.MkdirAll(filepath.Join(dir, "map_files"), 0o755); err != nil {
		f.t.Fatal(err)
	}
	stat := fmt.Sprintf("%d (%s) S%s %d 0 0\n", pid, filepath.Base(file), strings.Repeat(" 0", 18), startTime)
	maps := fmt.Sprintf("%x-%x r-xp 00000000 08:01 %d %s\n", lo, hi, startTime, file)
	for name, body := range map[string]string{"stat": stat, "maps": maps} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			f.t.Fatal(err)
		}
	}
	if err := os.Symlink(file, filepath.Join(dir, "map_files", fmt.Sprintf("%x-%x", lo, hi))); err != nil {
		f.t.Fatal(err)
	}
}

// addMapping adds an executable mapping of file at [lo, hi) to pid, a
// process set up by set, or with file "" one of no file (anonymous
// memory, a JIT compiler's). The maps file stays in address order, as the
// kernel lists mappings and as a mapSet must be: a mapping out of order
// is one that mapSet.find does not find.
func (f *fakeProc) addMapping(pid uint32, lo, hi uint64, file string) {
	dir := filepath.Join(f.root, fmt.Sprint(pid))
	b, err := os.ReadFile(filepath.Join(dir, "maps"))
	if err != nil {
		f.t.Fatal(err)
	}
	lines := append(strings.SplitAfter(string(b), "\n"), fmt.Sprintf("%x-%x r-xp 00000000 08:01 %d %s\n", lo, hi, lo, file))
	lines = slices.DeleteFunc(lines, func(l string) bool { return l == "" })
	start := func(line string) uint64 {
		hex, _, _ := strings.Cut(line, "-")
		v, err := strconv.ParseUint(hex, 16, 64)
		if err != nil {
			f.t.Fatalf("maps line %q: %v", line, err)
		}
		return v
	}
	slices.SortStableFunc(lines, func(a, b string) int { return cmp.Compare(start(a), start(b)) })
	if err := os.WriteFile(filepath.Join(dir, "maps"), []byte(strings.Join(lines, "")), 0o644); err != nil {
		f.t.Fatal(err)
	}
	if file == "" {
		return
	}
	if err := os.Symlink(file, filepath.Join(dir, "map_files", fmt.Sprintf("%x-%x", lo, hi))); err != nil {
		f.t.Fatal(err)
	}
}

// zombie makes pid a process started at startTime whose memory is gone,
// as the kernel shows a zombie or a process in exit: no mappings at all.
func (f *fakeProc) zombie(pid uint32, startTime uint64) {
	dir := filepath.Join(f.root, fmt.Sprint(pid))
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.t.Fatal(err)
	}
	stat := fmt.Sprintf("%d (dying) Z%s %d 0 0\n", pid, strings.Repeat(" 0", 18), startTime)
	for name, body := range map[string]string{"stat": stat, "maps": ""} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			f.t.Fatal(err)
		}
	}
}

// mmapEvent is the side-band record of an executable mmap.
func mmapEvent(time uint64, pid uint32, start, limit, offset uint64, file string, buildID []byte) event {
	return event{time: time, kind: eventMmap, pid: pid, m: mapping{start: start, limit: limit, offset: offset}, file: file, buildID: buildID}
}

// fakeSource hands out the samples queued with add, once.
type fakeSource struct {
	samples []Sample
	lost    uint64
}

func (s *fakeSource) add(pid uint32, time uint64, user ...uint64) {
	var comm [16]byte
	copy(comm[:], fmt.Sprint("p", pid))
	s.samples = append(s.samples, Sample{Time: time, Pid: pid, Tid: pid, Comm: comm, User: user})
}

func (s *fakeSource) Read(fn func(*Sample)) (int, error) {
	n := len(s.samples)
	for i := range s.samples {
		fn(&s.samples[i])
	}
	s.samples = s.samples[:0]
	return n, nil
}

func (s *fakeSource) Lost() (uint64, error) { return s.lost, nil }

func newTestCollector(t *testing.T, procRoot string) *Collector {
	t.Helper()
	c, err := New(Options{Frequency: 100, ProcRoot: procRoot, NoSideband: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// files returns the file of each sample's leaf, in sample order.
func leafFiles(p *stacks.Profile) []string {
	var out []string
	for _, s := range p.Samples {
		m := s.Stack[0].Mapping
		out = append(out, m.File+" "+m.BuildID)
	}
	return out
}

// TestPidReuseFromProc: without the side band, a pid that comes back as
// another program is noticed when its samples fall outside the old
// mappings, and the old samples keep the old program.
func TestPidReuseFromProc(t *testing.T) {
	trueBin, sleepBin := realPath(t, "/bin/true"), realPath(t, "/bin/sleep")
	proc := newFakeProc(t)
	proc.set(100, 111, 0x1000, 0x2000, trueBin)
	c := newTestCollector(t, proc.root)
	src := &fakeSource{}
	src.add(100, 1e9, 0x1500)
	if err := c.Drain(src); err != nil {
		t.Fatal(err)
	}
	proc.set(100, 222, 0x5000, 0x6000, sleepBin)
	src.add(100, 3e9, 0x5500)
	if err := c.Drain(src); err != nil {
		t.Fatal(err)
	}
	got := leafFiles(c.Profile())
	want := []string{trueBin + " " + fileBuildID(t, trueBin), sleepBin + " " + fileBuildID(t, sleepBin)}
	if !slices.Equal(got, want) {
		t.Fatalf("samples attributed to %q, want %q", got, want)
	}
	if st := c.Stats(); st.Processes != 2 || st.Samples != 2 {
		t.Fatalf("stats %+v, want 2 processes, 2 samples", st)
	}
}

// TestRefreshOnUnknownAddress: without the side band, a sample at an
// address outside the known mappings (a library loaded since /proc was
// read) rereads /proc: the new mapping is found for the same process, and
// the earlier sample keeps the mappings of its time.
func TestRefreshOnUnknownAddress(t *testing.T) {
	trueBin, sleepBin := realPath(t, "/bin/true"), realPath(t, "/bin/sleep")
	proc := newFakeProc(t)
	proc.set(100, 111, 0x1000, 0x2000, trueBin)
	c := newTestCollector(t, proc.root)
	src := &fakeSource{}
	src.add(100, 1e9, 0x1500)
	if err := c.Drain(src); err != nil {
		t.Fatal(err)
	}
	proc.addMapping(100, 0x5000, 0x6000, sleepBin)
	src.add(100, 2e9, 0x5500, 0x1500)
	if err := c.Drain(src); err != nil {
		t.Fatal(err)
	}
	got := leafFiles(c.Profile())
	want := []string{trueBin + " " + fileBuildID(t, trueBin), sleepBin + " " + fileBuildID(t, sleepBin)}
	if !slices.Equal(got, want) {
		t.Fatalf("samples attributed to %q, want %q", got, want)
	}
	if st := c.Stats(); st.Processes != 1 {
		t.Fatalf("stats %+v, want 1 process: a new mapping is no new process", st)
	}
}

// TestPidReuseFromSideband replays side-band records of a pid that runs
// two programs at the same addresses one after the other: each sample must
// resolve with the mappings of its time.
func TestPidReuseFromSideband(t *testing.T) {
	trueBin, sleepBin := realPath(t, "/bin/true"), realPath(t, "/bin/sleep")
	c := newTestCollector(t, t.TempDir())
	c.events = []event{
		{time: 10, kind: eventFork, pid: 200, ppid: 1},
		{time: 11, kind: eventExec, pid: 200},
		mmapEvent(12, 200, 0x1000, 0x2000, 0, trueBin, nil),
		{time: 20, kind: eventExit, pid: 200, tid: 200},
		{time: 30, kind: eventFork, pid: 200, ppid: 1},
		{time: 31, kind: eventExec, pid: 200},
		mmapEvent(32, 200, 0x1000, 0x2000, 0, sleepBin, []byte{0xb0, 0x0b}),
		{time: 40, kind: eventExit, pid: 200, tid: 200},
		// A later exec of the second process, not yet reached by any
		// sample of this drain: it must stay pending.
		{time: 1 << 62, kind: eventExec, pid: 300},
	}
	src := &fakeSource{}
	src.add(200, 35, 0x1100) // second program, listed first
	src.add(200, 15, 0x1100)
	if err := c.Drain(src); err != nil {
		t.Fatal(err)
	}
	if len(c.events) != 1 {
		t.Fatalf("%d side-band records pending after the drain, want the 1 in the future", len(c.events))
	}
	got := leafFiles(c.Profile())
	want := []string{trueBin + " " + fileBuildID(t, trueBin), sleepBin + " b00b"}
	if !slices.Equal(got, want) {
		t.Fatalf("samples attributed to %q, want %q", got, want)
	}
}

// TestSampleDuringExec: a sample taken in the kernel during exec, after
// the side band announced the new program, carries the user registers of
// the program that called exec and is resolved with its mappings.
func TestSampleDuringExec(t *testing.T) {
	c := newTestCollector(t, t.TempDir())
	c.events = []event{
		mmapEvent(1, 500, 0x1000, 0x2000, 0, "/old", []byte{0xa}),
		{time: 2, kind: eventExec, pid: 500},
		mmapEvent(4, 500, 0x1000, 0x2000, 0, "/new", []byte{0xb}),
	}
	src := &fakeSource{}
	src.add(500, 3, 0x1100)
	src.add(500, 5, 0x1100)
	src.samples[0].Kernel = []uint64{0xffffffff81000000}
	src.samples[1].Kernel = []uint64{0xffffffff81000000}
	if err := c.Drain(src); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range c.Profile().Samples {
		got = append(got, s.Stack[1].Mapping.File)
	}
	if want := []string{"/old", "/new"}; !slices.Equal(got, want) {
		t.Fatalf("user leaves in %q, want %q", got, want)
	}
}

// TestForkInheritsMappings: a forked child runs its parent's program
// without exec; mappings the parent adds later are not the child's.
func TestForkInheritsMappings(t *testing.T) {
	c := newTestCollector(t, t.TempDir())
	c.events = []event{
		mmapEvent(1, 600, 0x1000, 0x2000, 0, "/server", []byte{0xa}),
		{time: 2, kind: eventFork, pid: 601, ppid: 600},
		mmapEvent(4, 600, 0x3000, 0x4000, 0, "/plugin.so", []byte{0xb}),
	}
	src := &fakeSource{}
	src.add(601, 3, 0x1100)
	src.add(601, 5, 0x3100)
	src.add(600, 5, 0x3100)
	if err := c.Drain(src); err != nil {
		t.Fatal(err)
	}
	got := leafFiles(c.Profile())
	want := []string{"/server 0a", "[unknown] ", "/plugin.so 0b"}
	if !slices.Equal(got, want) {
		t.Fatalf("leaves in %q, want %q", got, want)
	}
}

// TestNoRefreshBeforeLaterExec: /proc shows the program a process runs
// now; a sample taken before a pending exec must not be resolved with it.
func TestNoRefreshBeforeLaterExec(t *testing.T) {
	proc := newFakeProc(t)
	c := newTestCollector(t, proc.root)
	c.events = []event{
		mmapEvent(1, 700, 0x1000, 0x2000, 0, "/old", []byte{0xa}),
		{time: 10, kind: eventExec, pid: 700},
	}
	// After the exec, /proc shows the new program covering the address.
	proc.set(700, 5, 0x5000, 0x6000, realPath(t, "/bin/true"))
	src := &fakeSource{}
	src.add(700, 5, 0x5100)
	if err := c.Drain(src); err != nil {
		t.Fatal(err)
	}
	if got := leafFiles(c.Profile()); !slices.Equal(got, []string{"[unknown] "}) {
		t.Fatalf("a sample before the exec resolved to %q from the later /proc", got)
	}
}

// TestSamplesAfterExitRecord: the kernel writes a process's exit record
// before the dying task unmaps its memory and closes its files, so its last
// samples (in exit_mmap, in __fput, with the user registers of _exit) come
// after the record. They belong to the exited program; a pid reused later
// belongs to the new one.
func TestSamplesAfterExitRecord(t *testing.T) {
	c := newTestCollector(t, t.TempDir())
	c.events = []event{
		mmapEvent(1, 800, 0x1000, 0x2000, 0, "/old", []byte{0xa}),
		{time: 10, kind: eventExit, pid: 800, tid: 800},
		{time: 20, kind: eventFork, pid: 800, ppid: 1},
		{time: 21, kind: eventExec, pid: 800},
		mmapEvent(22, 800, 0x1000, 0x2000, 0, "/new", []byte{0xb}),
	}
	src := &fakeSource{}
	src.add(800, 11, 0x1100) // the dying task, in exit_mmap
	src.add(800, 25, 0x1100) // the new process
	if err := c.Drain(src); err != nil {
		t.Fatal(err)
	}
	if got, want := leafFiles(c.Profile()), []string{"/old 0a", "/new 0b"}; !slices.Equal(got, want) {
		t.Fatalf("leaves in %q, want %q", got, want)
	}
}

// TestExitedProcessForgotten: an exited process that no sample used for
// exitedGrace leaves the process table; one still sampled, by a thread
// that outlives the main one, stays.
func TestExitedProcessForgotten(t *testing.T) {
	tb := newTable(t.TempDir(), nil, false, 1)
	for _, pid := range []uint32{1, 2} {
		tb.newImage(pid, tb.newSet(nil, nil))
		tb.exit(pid, pid, 100)
	}
	tb.forSample(2, 100+exitedGrace/2)
	tb.prune(100 + exitedGrace)
	if tb.byPid[1] != nil || tb.byPid[2] == nil {
		t.Fatalf("after the grace: pid 1 kept %v, pid 2 kept %v; want only pid 2", tb.byPid[1] != nil, tb.byPid[2] != nil)
	}
	tb.prune(100 + 2*exitedGrace)
	if len(tb.byPid) != 0 || len(tb.exitedPids) != 0 {
		t.Fatalf("%d processes, %d exited pids left", len(tb.byPid), len(tb.exitedPids))
	}
}

// TestDrainForgetsExitedProcesses: a recording drops an exited process
// from the table once no sample has used it for exitedGrace, and its
// samples keep their binary.
func TestDrainForgetsExitedProcesses(t *testing.T) {
	c := newTestCollector(t, t.TempDir())
	c.events = []event{
		mmapEvent(1, 950, 0x1000, 0x2000, 0, "/gone", []byte{0xa}),
		mmapEvent(1, 951, 0x1000, 0x2000, 0, "/running", []byte{0xb}),
		// Sample times are CLOCK_MONOTONIC: time 7 is long past the grace.
		{time: 7, kind: eventExit, pid: 950, tid: 950},
	}
	src := &fakeSource{}
	src.add(950, 5, 0x1100)
	src.add(951, 5, 0x1100)
	if err := c.Drain(src); err != nil {
		t.Fatal(err)
	}
	if c.table.byPid[950] != nil || c.table.byPid[951] == nil {
		t.Fatalf("after the drain: exited pid kept %v, running pid kept %v; want only the running one",
			c.table.byPid[950] != nil, c.table.byPid[951] != nil)
	}
	if got, want := leafFiles(c.Profile()), []string{"/gone 0a", "/running 0b"}; !slices.Equal(got, want) {
		t.Fatalf("leaves in %q, want %q", got, want)
	}
}

// TestZombieMapsKeepMappings: a process in exit, or a zombie, shows no
// mappings in /proc. A sample with an address outside the known mappings
// rereads /proc; that empty read must not wipe the mappings the process's
// samples resolve with.
func TestZombieMapsKeepMappings(t *testing.T) {
	proc := newFakeProc(t)
	c := newTestCollector(t, proc.root)
	c.events = []event{mmapEvent(1, 900, 0x1000, 0x2000, 0, "/app", []byte{0xa})}
	proc.zombie(900, 5)
	src := &fakeSource{}
	src.add(900, 5, 0x1100, 0x7777) // 0x7777: a stale frame pointer's return address
	src.add(900, 6, 0x1200)
	if err := c.Drain(src); err != nil {
		t.Fatal(err)
	}
	if got, want := leafFiles(c.Profile()), []string{"/app 0a", "/app 0a"}; !slices.Equal(got, want) {
		t.Fatalf("leaves in %q, want %q", got, want)
	}
	if c.table.byPid[900].refreshed != 5 {
		t.Error("the uncovered address did not make the collector read /proc")
	}
}

// TestFollowForksChildMappings: recording a command with its children
// (Pids and FollowForks), a child forked, exec'd and mapped within one
// drain is attributed to its binary even though its mmap record is read
// before the fork record that makes it tracked (the rings of two CPUs),
// while an unrelated process's mmap is ignored.
func TestFollowForksChildMappings(t *testing.T) {
	c, err := New(Options{Frequency: 99, ProcRoot: t.TempDir(), NoSideband: true, Pids: []uint32{100}, FollowForks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	exe := uint32(unix.PROT_READ | unix.PROT_EXEC)
	for _, r := range []perfring.Record{
		{Type: perfring.RecordMmap2, Pid: 101, Tid: 101, Time: 3, Addr: 0x1000, Len: 0x1000, Prot: exe, Filename: []byte("/child"), BuildID: []byte{0xc}},
		{Type: perfring.RecordMmap2, Pid: 200, Tid: 200, Time: 3, Addr: 0x1000, Len: 0x1000, Prot: exe, Filename: []byte("/stranger"), BuildID: []byte{0xd}},
		{Type: perfring.RecordFork, Pid: 101, Tid: 101, PPid: 100, PTid: 100, Time: 1},
		{Type: perfring.RecordComm, Misc: perfring.MiscCommExec, Pid: 101, Tid: 101, Time: 2, Comm: []byte("child")},
	} {
		c.copyRecord(&r)
	}
	src := &fakeSource{}
	src.add(101, 4, 0x1100)
	if err := c.Drain(src); err != nil {
		t.Fatal(err)
	}
	if got, want := leafFiles(c.Profile()), []string{"/child 0c"}; !slices.Equal(got, want) {
		t.Fatalf("the child's leaf in %q, want %q", got, want)
	}
	if c.table.byPid[200] != nil {
		t.Error("an untracked process's mmap made it tracked")
	}
}

// BenchmarkReadProcess reads a process's start time and mappings from
// /proc, as the table does for every process it meets: B/op is what a
// read allocates.
func BenchmarkReadProcess(b *testing.B) {
	t := newTable("/proc", nil, false, 0)
	pid := uint32(os.Getpid())
	b.ReportAllocs()
	for b.Loop() {
		if _, maps, _, err := t.read(pid); err != nil || len(maps) == 0 {
			b.Fatal(err, len(maps))
		}
	}
}
