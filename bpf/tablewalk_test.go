package bpf

import (
	"bufio"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sprof/sprof/internal/elfx"
	"github.com/sprof/sprof/internal/testenv"
	"github.com/sprof/sprof/unwind"
)

var deepPath = fixtureDir() + "/deep" // recursion without frame pointers

// loadProcessTables builds the unwind table of every executable file pid
// maps, as the collector does, loads it and maps it for pid. It returns
// the tables' rows in all.
func loadProcessTables(t testing.TB, s *Sampler, pid int) int {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// start-end perms offset dev inode path
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || !strings.Contains(fields[1], "x") || !strings.HasPrefix(fields[5], "/") {
			continue
		}
		var start, end, offset uint64
		fmt.Sscanf(fields[0], "%x-%x", &start, &end)
		fmt.Sscanf(fields[2], "%x", &offset)
		path := fields[5]
		bin, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		st, _, _, err := unwind.BuildTable(bin, path, true)
		if err != nil {
			bin.Close()
			t.Fatalf("%s: %v", path, err)
		}
		ef, err := elf.NewFile(bin)
		if err != nil {
			bin.Close()
			t.Fatal(err)
		}
		bias := elfx.LoadSegments(ef).Bias(start, offset)
		bin.Close()
		ut, err := NewUnwindTable(st)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		id, err := s.LoadTable(ut)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if err := s.MapTable(uint32(pid), start, end, bias, id); err != nil {
			t.Fatal(err)
		}
		rows += ut.Rows()
	}
	return rows
}

// monotonic is CLOCK_MONOTONIC now, the clock of Sample.Time.
func monotonic(t testing.TB) uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Fatal(err)
	}
	return uint64(ts.Nano())
}

// deepChain checks user frames against the deep fixture's only stack:
// spin, depth recurse frames, main, libc's start code, _start.
type deepChain struct {
	fx                    *fixtureELF
	depth                 int
	retSpin, retRec, retM uint64
}

func newDeepChain(t testing.TB, depth int) *deepChain {
	fx := loadELF(t, deepPath)
	return &deepChain{fx: fx, depth: depth, retSpin: fx.returnAfterCall(t, "recurse", "spin"),
		retRec: fx.returnAfterCall(t, "recurse", "recurse"), retM: fx.returnAfterCall(t, "main", "recurse")}
}

// whole says whether u is the whole chain; if not, why.
func (c *deepChain) whole(u []uint64) (bool, string) {
	d := c.depth
	if len(u) < d+3 {
		return false, fmt.Sprintf("%d frames, want at least %d", len(u), d+3)
	}
	if !c.fx.contains("spin", u[0]) || u[1] != c.retSpin {
		return false, "leaf " + hexFrames(u[:2])
	}
	for i := 2; i <= d; i++ {
		if u[i] != c.retRec {
			return false, fmt.Sprintf("frame %d is %#x, want %#x in recurse", i, u[i], c.retRec)
		}
	}
	if u[d+1] != c.retM {
		return false, fmt.Sprintf("frame %d is %#x, want %#x in main", d+1, u[d+1], c.retM)
	}
	if last := u[len(u)-1]; !c.fx.contains("_start", last) {
		return false, fmt.Sprintf("last frame %#x is not in _start; tail %s", last, hexFrames(u[d+1:]))
	}
	return true, ""
}

// TestTableWalkDeep: a recursion 400 and 1,000 frames deep through code
// without frame pointers (256-byte frames, 100 and 250 KiB of stack, more
// than any stack copy), its binary's and libc's tables loaded: at least
// 99% of the samples taken after the load walk the exact chain to _start
// in the kernel, marked whole, without a stack copy; on every kernel path
// (5.10's: chunks and tail calls).
func TestTableWalkDeep(t *testing.T) {
	requireFixture(t)
	for _, depth := range []int{400, 1000} {
		t.Run(strconv.Itoa(depth), func(t *testing.T) {
			chain := newDeepChain(t, depth)
			onEveryPath(t, func(t *testing.T, features *Features) {
				for _, batched := range batchings(features) {
					t.Run(fmt.Sprintf("batched=%v", batched), func(t *testing.T) { walkDeep(t, chain, depth, features, batched) })
				}
			})
		})
	}
}

// walkDeep is TestTableWalkDeep on one kernel path, with the walk's steps
// batched or not.
func walkDeep(t *testing.T, chain *deepChain, depth int, features *Features, batched bool) {
	cmd, _ := startBinary(t, deepPath, strconv.Itoa(depth))
	pid := cmd.Process.Pid
	waitCPUTime(t, pid, 50*time.Millisecond)
	s := openSampler(t, Config{Frequency: 999, Pids: []uint32{uint32(pid)}, User: true, Kernel: true,
		UnwindTables: DefaultUnwindTables, features: features, batchedSteps: &batched})
	rows := loadProcessTables(t, s, pid)
	since := monotonic(t)
	got := collectN(t, s, 300, func(x *Sample) bool { return x.Pid == uint32(pid) && x.Time > since })
	if len(got) < 100 {
		t.Fatalf("%d samples in 10 s", len(got))
	}
	good, why := 0, map[string]int{}
	for _, x := range got {
		ok, reason := chain.whole(x.user)
		switch {
		case !ok:
			why[reason]++
		case !x.UserTables || x.UserTruncated || x.StackCopy != nil:
			why[fmt.Sprintf("tables %v truncated %v copy %v", x.UserTables, x.UserTruncated, x.StackCopy != nil)]++
		default:
			good++
		}
	}
	st, err := s.TableStats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d of %d samples whole (%d rows loaded, %d bytes); walks ended: %v", good, len(got), rows, st.Used, st.Walks)
	if float64(good) < 0.99*float64(len(got)) {
		t.Errorf("%d of %d samples have the whole chain, want 99%%; others: %v", good, len(got), why)
	}
}

// TestTableWalkForgetsUnmapped: the walk remembers the mappings it found
// in earlier samples on each CPU (find_mapping's slots), and forgets them
// when the mappings change: after UnmapPid no sample of the process is
// walked over its tables, and once they are mapped again its walks are
// whole again. Without the epoch that UnmapPid bumps, the slots would go
// on naming the unmapped code.
func TestTableWalkForgetsUnmapped(t *testing.T) {
	requireFixture(t)
	chain := newDeepChain(t, 32)
	cmd, _ := startBinary(t, deepPath, "32")
	pid := cmd.Process.Pid
	waitCPUTime(t, pid, 50*time.Millisecond)
	s := openSampler(t, Config{Frequency: 999, Pids: []uint32{uint32(pid)}, User: true, Kernel: true,
		UnwindTables: DefaultUnwindTables})
	collect := func() []sampleCopy {
		since := monotonic(t)
		return collectN(t, s, 100, func(x *Sample) bool { return x.Pid == uint32(pid) && x.Time > since })
	}
	wholeWalks := func(step string, got []sampleCopy) {
		good := 0
		for _, x := range got {
			if ok, _ := chain.whole(x.user); ok && x.UserTables && !x.UserTruncated {
				good++
			}
		}
		if float64(good) < 0.99*float64(len(got)) {
			t.Errorf("%s: %d of %d samples walked whole over the tables, want 99%%", step, good, len(got))
		}
	}
	loadProcessTables(t, s, pid)
	wholeWalks("mapped", collect())
	s.UnmapPid(uint32(pid))
	walked := 0
	for _, x := range collect() {
		if x.UserTables {
			walked++
		}
	}
	if walked > 0 {
		t.Errorf("unmapped: %d samples walked over the tables, want none", walked)
	}
	loadProcessTables(t, s, pid)
	wholeWalks("mapped again", collect())
}

// TestTableWalkWakesForUndescribed: a table walk that meets a process
// user space has not described (no MapProcess, no mapping) wakes the
// reader at once, in a ring that would not reach its quarter-full wakeup
// for minutes at this rate; once the process is described (MapProcess,
// though none of its mappings has a table), its walks no longer do.
func TestTableWalkWakesForUndescribed(t *testing.T) {
	requireFixture(t)
	cmd, _ := startBinary(t, deepPath, "32")
	pid := uint32(cmd.Process.Pid)
	s := openSampler(t, Config{Frequency: 99, Pids: []uint32{pid}, User: true, UnwindTables: minUnwindTables,
		RingBufferSize: 16 << 20})
	select {
	case <-s.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("no wakeup in 30 s for a process not described")
	}
	if err := s.MapProcess(pid); err != nil {
		t.Fatal(err)
	}
	// A sample of the fixture's one thread begun after MapProcess comes
	// after every sample begun before, 10 ms apart at this rate: the
	// wakeup one of those asked for is pending then, if any.
	since := monotonic(t)
	after := func(x *Sample) bool { return x.Pid == pid && x.Time > since }
	collectN(t, s, 1, after)
	select {
	case <-s.Ready():
	default:
	}
	got := collectN(t, s, 20, after)
	if len(got) < 20 {
		t.Fatalf("%d samples in 10 s, want 20", len(got))
	}
	select {
	case <-s.Ready():
		t.Errorf("a wakeup while %d samples of the described process were taken", len(got))
	default:
	}
}

// BenchmarkTableWalk measures the program's cost per sample walking
// stacks without frame pointers over unwind tables in the kernel, from
// the kernel's BPF run-time statistics counted after the tables are
// loaded, at 499 Hz while two fixtures (1, 32 or 400 frames of recursion)
// keep both CPUs busy; on each kernel path, configured as sprof samples by
// default (shippedSampling), with the ring the sampler sizes for that.
// Depth 1, six frames with main and libc's start code, is the shallow
// stack without frame pointers of the reference figures the cost goal was
// set against (the copy path's and other profilers'), so that a host's
// figures can be set beside those. Each iteration is one drain, at the
// ring's quarter-full wakeup. Then, for as many drains, a sampler that
// copies 16 KiB of stack instead, as --unwind copy does, follows the same
// processes: copy-bpf-ns/sample and copy-bytes/sample compare. One after
// the other, not side by side: the copies' writes would evict the other
// sampler's ring from the caches, and writing into ring memory that no
// cache holds is much of a small record's cost.
func BenchmarkTableWalk(b *testing.B) {
	requireFixture(b)
	for _, depth := range []int{1, 32, 400} {
		for _, path := range kernelPaths {
			b.Run(fmt.Sprintf("%s/depth=%d", path.name, depth), func(b *testing.B) {
				benchWalk(b, pathFeatures(path.without), deepPath, strconv.Itoa(depth), nil)
			})
		}
	}
}

// BenchmarkTableWalkJIT is BenchmarkTableWalk's probed path over the
// jitwalk fixture's middle mode: nine frames, one of them JIT code and one
// code of a file without CFI, which the walk takes by the frame-pointer
// rule (see TestTableWalkJIT).
func BenchmarkTableWalkJIT(b *testing.B) {
	requireFixture(b)
	benchWalk(b, nil, jitPath, "middle", func(s *Sampler, pid int) { describeJIT(b, s, pid) })
}

// BenchmarkTableWalkPhases is BenchmarkTableWalk's probed path at 6 and 37
// frames with the program timing its phases (enum phase in sprof.bpf.c):
// the BPF ns a sample spends in each, one clock read apiece included, as
// filter-ns/sample, header-ns/sample and so on, and bpf-ns/sample as
// BenchmarkTableWalk reports it, whose own figure it exceeds by the clock
// reads. On a host where a sample costs more than here, it says where.
func BenchmarkTableWalkPhases(b *testing.B) {
	requireFixture(b)
	names := []string{"filter", "header", "regs", "walk", "python", "copy", "wakeup", "send"} // PHASE_FILTER on
	for _, depth := range []int{1, 32} {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			var pids []uint32
			for range 2 {
				cmd, _ := startBinary(b, deepPath, strconv.Itoa(depth))
				pids = append(pids, uint32(cmd.Process.Pid))
			}
			var before, after phaseTimes
			cfg := shippedSampling(pids)
			cfg.phaseTiming = true
			perSample := drainCost(b, cfg,
				func(s *Sampler) {
					for _, pid := range pids {
						loadProcessTables(b, s, int(pid))
					}
					before = readPhases(b, s)
				}, func(*Sample) {}, b.Loop, func(s *Sampler) { after = readPhases(b, s) })
			timed := after.Ns[0] - before.Ns[0]
			if timed == 0 {
				b.Fatal("no sample timed")
			}
			for i, name := range names {
				b.ReportMetric(float64(after.Ns[i+1]-before.Ns[i+1])/float64(timed), name+"-ns/sample")
			}
			b.ReportMetric(perSample, "bpf-ns/sample")
		})
	}
}

// phaseTimes is struct phase_times of sprof.bpf.c.
type phaseTimes struct {
	At uint64
	Ns [9]uint64 // PHASES
}

// readPhases sums the phases map over the CPUs.
func readPhases(b *testing.B, s *Sampler) phaseTimes {
	var perCPU []phaseTimes
	if err := s.objs.Phases.Lookup(uint32(0), &perCPU); err != nil {
		b.Fatal(err)
	}
	var sum phaseTimes
	for _, t := range perCPU {
		for i := range sum.Ns {
			sum.Ns[i] += t.Ns[i]
		}
	}
	return sum
}

// benchWalk runs two processes of bin with arg, and measures the sampler
// walking their stacks over tables, each process's loaded and, with
// describe, described further, then the stack copy instead.
func benchWalk(b *testing.B, features *Features, bin, arg string, describe func(s *Sampler, pid int)) {
	var pids []uint32
	for range 2 {
		cmd, _ := startBinary(b, bin, arg)
		pids = append(pids, uint32(cmd.Process.Pid))
	}
	var tableSize, copySize recordSizes
	var whole, frames int
	count := func(x *Sample) {
		tableSize.add(x)
		frames += len(x.User)
		if x.UserTables && !x.UserTruncated {
			whole++
		}
	}
	cfg := shippedSampling(pids)
	cfg.features = features
	perSample := drainCost(b, cfg,
		func(s *Sampler) {
			for _, pid := range pids {
				loadProcessTables(b, s, int(pid))
				if describe != nil {
					describe(s, int(pid))
				}
			}
		}, count, b.Loop, nil)
	drains := b.N
	copyPerSample := drainCost(b, Config{Frequency: 499, Pids: pids, User: true, Kernel: true,
		StackCopy: 16 << 10, CopyAll: true, RunTimeStats: true, features: features},
		func(*Sampler) {}, copySize.add, func() bool { drains--; return drains >= 0 }, nil)
	if tableSize.samples == 0 || copySize.samples == 0 {
		b.Fatal("no samples")
	}
	b.ReportMetric(perSample, "bpf-ns/sample")
	b.ReportMetric(perSample*float64(tableSize.samples)/float64(frames), "bpf-ns/frame")
	b.ReportMetric(copyPerSample, "copy-bpf-ns/sample")
	b.ReportMetric(float64(frames)/float64(tableSize.samples), "frames/sample")
	b.ReportMetric(100*float64(whole)/float64(tableSize.samples), "%whole")
	b.ReportMetric(tableSize.mean(tableSize.bytes), "bytes/sample")
	b.ReportMetric(copySize.mean(copySize.bytes), "copy-bytes/sample")
}

// shippedSampling is the Config sprof's sampling commands run with by
// default (--unwind auto, --stack-copy 16K, --python) for pids, at 499 Hz
// with run-time statistics: a sample of a process whose tables are loaded
// then pays what it does on users' hosts, the lookups that find the
// process unmarked for copies, for Python and for Go included.
func shippedSampling(pids []uint32) Config {
	return Config{Frequency: 499, Pids: pids, User: true, Kernel: true, StackCopy: 16 << 10, Python: true,
		UnwindTables: DefaultUnwindTables, RunTimeStats: true}
}

// drainCost opens a sampler with cfg, runs setup on it, then drains it
// into each at each of its wakeups (a quarter of the ring, as the
// collector drains) while more says so, and returns the program's run
// time per sample it sent meanwhile; done, if not nil, sees the sampler
// last, which is closed on return.
func drainCost(b *testing.B, cfg Config, setup func(*Sampler), each func(*Sample), more func() bool, done func(*Sampler)) float64 {
	b.Helper()
	s, err := Open(cfg)
	if err != nil {
		b.Fatalf("Open: %v", err)
	}
	defer func() {
		if err := s.Close(); err != nil {
			b.Errorf("Close: %v", err)
		}
	}()
	setup(s)
	select { // a wakeup while setup ran: the drain below reads its records
	case <-s.Ready():
	default:
	}
	if _, err := s.Read(func(*Sample) {}); err != nil {
		b.Fatal(err)
	}
	before, err := s.Stats()
	if err != nil {
		b.Fatal(err)
	}
	drainWakeups(b, s, each, more)
	after := runStats(b, s)
	if done != nil {
		done(s)
	}
	if after.Sent == before.Sent {
		b.Fatalf("no samples sent in the drains: %+v", after)
	}
	return float64(after.RunTimeNs-before.RunTimeNs) / float64(after.Sent-before.Sent)
}

// TestTableEviction: when the tables outgrow Config.UnwindTables, loading
// one evicts the one used least recently (here the first loaded: no walk
// used any), which TableLoaded then reports gone, so that its user can
// load it again; the last one loaded stays.
func TestTableEviction(t *testing.T) {
	testenv.RequireRoot(t)
	libc, err := filepath.Glob("/lib/*-linux-gnu/libc.so.6")
	if err != nil || len(libc) == 0 {
		t.Skip("no libc.so.6 under /lib/*-linux-gnu")
	}
	f, err := os.Open(libc[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _, _, err := unwind.BuildTable(f, libc[0], false)
	if err != nil {
		t.Fatal(err)
	}
	ut, err := NewUnwindTable(st)
	if err != nil {
		t.Fatal(err)
	}
	s := openSampler(t, Config{Frequency: 19, User: true, UnwindTables: minUnwindTables})
	var ids []TableID
	for i := 0; ; i++ {
		id, err := s.LoadTable(ut)
		if err != nil {
			t.Fatalf("load %d of libc's table (%d rows): %v", i+1, ut.Rows(), err)
		}
		ids = append(ids, id)
		if st, err := s.TableStats(); err != nil {
			t.Fatal(err)
		} else if st.Evicted > 0 {
			break
		}
		if i == 64 {
			t.Fatalf("64 loads of libc's table (%d rows) into %d bytes evicted none", ut.Rows(), minUnwindTables)
		}
	}
	if s.TableLoaded(ids[0]) {
		t.Errorf("the first table, evicted, is still loaded")
	}
	if !s.TableLoaded(ids[len(ids)-1]) {
		t.Errorf("the last table loaded is not loaded")
	}
}

// BenchmarkLoadTable measures LoadTable, the write of a binary's table
// into the kernel's arrays, on the largest libraries found here (libc
// always; libLLVM where clang is installed): ns/row. It stands between a
// binary's first samples and whole stacks through its frames. Each
// iteration loads the table once more, evicting the least recently loaded
// when the arrays are full.
func BenchmarkLoadTable(b *testing.B) {
	testenv.RequireRoot(b)
	for _, path := range benchLibraries(b) {
		b.Run(filepath.Base(path), func(b *testing.B) {
			ut, err := NewUnwindTable(buildTable(b, path))
			if err != nil {
				b.Fatalf("%s: %v", path, err)
			}
			s := openSampler(b, Config{Frequency: 1, Pids: []uint32{uint32(os.Getpid())}, User: true, UnwindTables: DefaultUnwindTables})
			for b.Loop() {
				if _, err := s.LoadTable(ut); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*ut.Rows()), "ns/row")
			b.ReportMetric(float64(ut.Rows()), "rows")
		})
	}
}

var jitPath = fixtureDir() + "/jitwalk" // code without CFI between frames without frame pointers

// checkSignalWalk runs jitwalk's signal mode and wants none of the
// samples in its handler walked over the tables to be shown whole (see
// TestTableWalkJIT).
func checkSignalWalk(t *testing.T, fx *fixtureELF, features *Features) {
	cmd, _ := startBinary(t, jitPath, "signal")
	pid := cmd.Process.Pid
	waitCPUTime(t, pid, 50*time.Millisecond)
	s := openSampler(t, Config{Frequency: 999, Pids: []uint32{uint32(pid)}, User: true,
		UnwindTables: DefaultUnwindTables, features: features})
	loadProcessTables(t, s, pid)
	describeJIT(t, s, pid)
	if err := s.MapProcess(uint32(pid)); err != nil {
		t.Fatal(err)
	}
	got := collectN(t, s, 100, func(x *Sample) bool { return x.Pid == uint32(pid) && fx.contains("spin", x.PC) })
	if len(got) < 50 {
		t.Fatalf("%d samples in the handler in 10 s", len(got))
	}
	tables := 0
	for _, x := range got {
		if x.UserTables {
			tables++
		}
		if x.UserTables && !x.UserTruncated {
			t.Fatalf("%s shown whole across the signal frame", hexFrames(x.user))
		}
	}
	t.Logf("%d samples in the handler, %d walked over the tables, all truncated", len(got), tables)
}

// describeJIT says where pid maps executable memory of no file, as the
// collector does from /proc/PID/maps, and returns the first such range's
// start.
func describeJIT(t testing.TB, s *Sampler, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	var first uint64
	for _, line := range strings.Split(string(b), "\n") {
		// start-end perms offset dev inode [path]
		fields := strings.Fields(line)
		if len(fields) != 5 || !strings.Contains(fields[1], "x") {
			continue
		}
		var start, end uint64
		fmt.Sscanf(fields[0], "%x-%x", &start, &end)
		if err := s.MapJIT(uint32(pid), start, end); err != nil {
			t.Fatal(err)
		}
		if first == 0 {
			first = start
		}
	}
	if first == 0 {
		t.Fatalf("pid %d maps no executable memory of no file", pid)
	}
	return first
}

// TestTableWalkJIT: where no table has a rule, in code of no file (a JIT
// compiler's, MapJIT) and in code of a file its CFI does not describe,
// the walk goes on by the frame-pointer rule, to the outermost frame: a
// stack with such frames between frames without frame pointers is whole,
// exact, without a stack copy, in at least 99% of the samples, whether the
// sample stops in the JIT code (top) or below it (middle). On the path
// without bpf_loop the walk ends at such a frame, marked truncated, or
// the frame-pointer walk takes a topmost one; on every path no other
// stack walked over the tables is shown whole. (The frame-pointer walk
// cannot tell that outer, without a frame record, hides main: on arm64,
// whose main keeps a record, it shows the chain without main, whole.)
// In signal, the spin moves to a SIGALRM handler after a second, on the
// stack above the signal frame, whose return address (the signal
// trampoline's, with no CFI the tables keep) follows no call: the walk
// must not take the interrupted JIT code's record for the trampoline's and
// show the stack whole without the interrupted frame.
func TestTableWalkJIT(t *testing.T) {
	requireFixture(t)
	fx := loadELF(t, jitPath)
	// Where jitwalk.c's calls return, and where jit_spin spins.
	intoNoCFI, intoJIT, spinFrom, spinTo := uint64(12), uint64(16+6), uint64(48), uint64(48+6)
	if runtime.GOARCH == "arm64" {
		intoNoCFI, intoJIT, spinTo = 20, 16+12, 48+12
	}
	intoNoCFI += fx.syms["nocfi_call"].Value
	intoOuter := fx.returnAfterCall(t, "outer", "nocfi_call")
	for _, mode := range []string{"middle", "top", "signal"} {
		t.Run(mode, func(t *testing.T) {
			onEveryPath(t, func(t *testing.T, features *Features) {
				loop := features == nil && ProbeFeatures().LoopWalk()
				if mode == "signal" {
					checkSignalWalk(t, fx, features)
					return
				}
				cmd, _ := startBinary(t, jitPath, mode)
				pid := cmd.Process.Pid
				waitCPUTime(t, pid, 50*time.Millisecond)
				s := openSampler(t, Config{Frequency: 999, Pids: []uint32{uint32(pid)}, User: true,
					UnwindTables: DefaultUnwindTables, features: features})
				loadProcessTables(t, s, pid)
				page := describeJIT(t, s, pid)
				if err := s.MapProcess(uint32(pid)); err != nil {
					t.Fatal(err)
				}
				// The chain below the frames without CFI.
				want := []uint64{page + intoJIT, intoNoCFI, intoOuter}
				if mode == "top" {
					want = want[1:]
				}
				since := monotonic(t)
				got := collectN(t, s, 200, func(x *Sample) bool { return x.Pid == uint32(pid) && x.Time > since })
				if len(got) < 100 {
					t.Fatalf("%d samples in 10 s", len(got))
				}
				whole, why := 0, map[string]int{}
				for _, x := range got {
					u, top := x.user, 2 // spin and inner's frames
					if mode == "top" {
						top = 1 // jit_spin's
					}
					exact := len(u) > top+len(want)+1 && slices.Equal(u[top:top+len(want)], want) &&
						fx.contains("main", u[top+len(want)]) && fx.contains("_start", u[len(u)-1])
					switch {
					case mode == "middle" && (len(u) < 2 || !fx.contains("spin", u[0]) || u[1] != fx.returnAfterCall(t, "inner", "spin")):
						why["leaf "+hexFrames(u[:min(len(u), 2)])]++
					case mode == "top" && (len(u) < 1 || u[0] < page+spinFrom || u[0] >= page+spinTo):
						why["leaf "+hexFrames(u[:min(len(u), 1)])]++
					case exact && x.UserTables && !x.UserTruncated && x.StackCopy == nil:
						whole++
					case x.UserTables && !x.UserTruncated:
						t.Fatalf("%s shown whole, want %s below the leaf, then main, libc and _start",
							hexFrames(u), hexFrames(want))
					default:
						why[fmt.Sprintf("%d frames, truncated %v (tables %v)", len(u), x.UserTruncated, x.UserTables)]++
					}
				}
				st, err := s.TableStats()
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%d of %d samples whole; others: %v; walks ended: %v", whole, len(got), why, st.Walks)
				if loop && float64(whole) < 0.99*float64(len(got)) {
					t.Errorf("%d of %d samples walked whole through the code without CFI, want 99%%", whole, len(got))
				}
			})
		})
	}
}
