package collector

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sprof/sprof/stacks"
	"github.com/sprof/sprof/symbolize"
)

// TestCutIntervals: each Cut holds only its interval's samples and lost
// count, intervals follow each other without a gap, and the process table
// carries over, so a process mapped in the first interval is attributed in
// the second, even when /proc no longer shows it.
func TestCutIntervals(t *testing.T) {
	proc := newFakeProc(t)
	app := filepath.Join(t.TempDir(), "app")
	if err := os.WriteFile(app, []byte("not an ELF file"), 0o755); err != nil {
		t.Fatal(err)
	}
	proc.set(10, 100, 0x1000, 0x2000, app)
	c := newTestCollector(t, proc.root)
	src := &fakeSource{lost: 3}
	src.add(10, 5, 0x1100)
	src.add(10, 6, 0x1100)
	p1, s1 := c.Cut(src)
	if len(p1.Samples) != 1 || p1.Samples[0].Count != 2 || s1.Samples != 2 || s1.Stacks != 1 || s1.Processes != 1 {
		t.Fatalf("first interval: %d samples, stats %+v; want one stack seen twice", len(p1.Samples), s1)
	}
	if p1.Lost != 3 || s1.Lost != 3 {
		t.Errorf("first interval lost %d (stats %d), want 3 (3)", p1.Lost, s1.Lost)
	}

	os.RemoveAll(filepath.Join(proc.root, "10"))
	src.lost = 5
	src.add(10, 7, 0x1200)
	p2, s2 := c.Cut(src)
	if got, want := leafFiles(p2), []string{app + " "}; !slices.Equal(got, want) {
		t.Fatalf("second interval's leaves in %q, want %q", got, want)
	}
	if p2.Samples[0].Count != 1 || s2.Samples != 1 || s2.Stacks != 1 {
		t.Errorf("second interval: count %d, stats %+v; want the new sample only", p2.Samples[0].Count, s2)
	}
	if p2.Lost != 2 || s2.Lost != 5 {
		t.Errorf("second interval lost %d (stats %d), want 2 (5 since New)", p2.Lost, s2.Lost)
	}
	if !p2.Start.Equal(p1.Start.Add(p1.Duration)) {
		t.Errorf("second interval starts at %v, first ended at %v", p2.Start, p1.Start.Add(p1.Duration))
	}

	p3, s3 := c.Cut(src)
	if len(p3.Samples) != 0 || s3.Samples != 0 || p3.Lost != 0 {
		t.Errorf("idle interval: %d samples, %d counted, %d lost; want none", len(p3.Samples), s3.Samples, p3.Lost)
	}
}

// TestCutForgetsExitedProcesses: after a Cut, a process that exited long
// enough ago leaves the table and its binary's descriptor is closed (a
// deleted binary's space is freed), while a running process keeps its own.
func TestCutForgetsExitedProcesses(t *testing.T) {
	dir := t.TempDir()
	proc := newFakeProc(t)
	var bins []string
	for i, pid := range []uint32{30, 40} {
		bin := filepath.Join(dir, fmt.Sprint("bin", pid))
		if err := os.WriteFile(bin, []byte("not an ELF file"), 0o755); err != nil {
			t.Fatal(err)
		}
		proc.set(pid, uint64(100+i), 0x1000, 0x2000, bin)
		bins = append(bins, bin)
	}
	c := newTestCollector(t, proc.root)
	src := &fakeSource{}
	src.add(30, 5, 0x1100)
	src.add(40, 5, 0x1100)
	c.Cut(src)
	fs := c.table.files
	if fs.pinned != 2 {
		t.Fatalf("%d files pinned after samples in two binaries, want 2", fs.pinned)
	}
	exited := c.table.byPid[30].maps.maps[0].bin

	// Sample times are CLOCK_MONOTONIC: time 7 is long past the grace.
	c.events = []event{{time: 7, kind: eventExit, pid: 30, tid: 30}}
	c.Cut(src)
	if c.table.byPid[30] != nil || c.table.byPid[40] == nil {
		t.Fatal("the exited process was kept or the running one forgotten")
	}
	if exited.pinned != nil || fs.pinned != 1 || len(fs.byKey) != 1 {
		t.Errorf("exited binary pinned %v; %d pinned, %d files known; want only %s", exited.pinned != nil, fs.pinned, len(fs.byKey), bins[1])
	}
	for _, f := range fs.byKey {
		if f.name != bins[1] || f.pinned == nil {
			t.Errorf("kept %s (pinned %v), want %s pinned", f.name, f.pinned != nil, bins[1])
		}
	}
}

// An agent drains often and cuts a profile every interval.
func ExampleCollector_Cut() {
	c, err := New(Options{Frequency: 19, NoSideband: true, ProcRoot: os.TempDir()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	src := &fakeSource{}
	for interval := range 2 {
		for range interval + 1 {
			src.add(1<<30, 1, 0x401000)
			c.Drain(src) // every 250 ms
		}
		p, stats := c.Cut(src) // every 15 s
		fmt.Println(len(p.Samples), "stack,", stats.Samples, "samples")
	}
	// Output:
	// 1 stack, 1 samples
	// 1 stack, 2 samples
}

// oneFrame names every address alike, at no cost, so that benchmarks
// measure the collector rather than a symbolizer.
type oneFrame struct{}

func (oneFrame) Symbolize(dst []stacks.Frame, _ symbolize.Binary, _ uint64) ([]stacks.Frame, error) {
	return append(dst, stacks.Frame{Function: "f"}), nil
}

// BenchmarkCut measures what an agent pays every interval beyond the
// samples themselves: building and symbolizing the interval's profile and
// starting the next, for 2,000 distinct 32-frame stacks of 100 processes
// that all map one binary.
func BenchmarkCut(b *testing.B) {
	const stacksPerCut, depth, procs = 2000, 32, 100
	proc := &fakeProc{root: b.TempDir()}
	app := filepath.Join(b.TempDir(), "app")
	if err := os.WriteFile(app, []byte("not an ELF file"), 0o755); err != nil {
		b.Fatal(err)
	}
	c, err := New(Options{Frequency: 19, ProcRoot: proc.root, NoSideband: true, Symbolizer: oneFrame{}})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for pid := range uint32(procs) {
		c.table.newImage(pid+1000, c.table.newSet([]mapping{{start: 0x400000, limit: 0x800000, bin: c.table.files.intern(fileKey{name: app})}}, nil))
	}
	src := &fakeSource{}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		for i := range stacksPerCut {
			user := make([]uint64, depth)
			for j := range user {
				user[j] = 0x400000 + uint64((i*depth+j)%50000)*16
			}
			src.add(uint32(1000+i%procs), uint64(i), user...)
		}
		c.Drain(src)
		b.StartTimer()
		if p, _ := c.Cut(src); len(p.Samples) != stacksPerCut {
			b.Fatalf("%d samples, want %d", len(p.Samples), stacksPerCut)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*stacksPerCut*depth), "ns/frame")
}
