package report

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sprof/sprof/cbf"
	"github.com/sprof/sprof/cbf/recording"
	"github.com/sprof/sprof/stacks"
	"github.com/sprof/sprof/symbolize"
	"github.com/sprof/sprof/symbolize/buildid"
)

// spin is a fixture whose functions c, b, a and main call each other in
// that order (testdata/e2e/spin.c); its text segment is at file offset and
// address 0x1000, and the functions at these addresses.
const (
	spinPath = "../testdata/e2e/spin"
	spinLoad = 0x555555554000 // where the kernel loads a PIE
	fnMain   = 0x1060
	fnC      = 0x11c0
	fnB      = 0x1260
	fnA      = 0x1270
)

var start = time.Unix(1_700_000_000, 0)

// spinChain is a stack in spin as a walker returns it: the PC in c, then
// return addresses into b, a and main.
var spinChain = []uint64{spinLoad + fnC + 4, spinLoad + fnB + 5, spinLoad + fnA + 5, spinLoad + fnMain + 5}

func spinMap(t *testing.T, buildID []byte) *cbf.ImageMap {
	t.Helper()
	path, err := filepath.Abs(spinPath)
	if err != nil {
		t.Fatal(err)
	}
	m, err := cbf.NewImageMap("", cbf.Word64, []cbf.Image{
		{Path: path, BuildID: buildID, Base: spinLoad + 0x1000, EndOfText: spinLoad + 0x2000, TextOffset: 0x1000},
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// newSpinWriter starts a recording into buf at start whose clock reads
// *clock, and returns spin's real build ID for its maps.
func newSpinWriter(t *testing.T, buf *bytes.Buffer, clock *time.Time) (*recording.Writer, []byte) {
	t.Helper()
	id, err := buildid.File(spinPath)
	if err != nil {
		t.Fatal(err)
	}
	realID, _ := hex.DecodeString(id)
	w, err := recording.NewWriter(buf, recording.Options{Host: "h", Kernel: "6.18.0", Arch: "x86_64", Frequency: 10,
		Start: start, Clock: func() time.Time { return *clock }})
	if err != nil {
		t.Fatal(err)
	}
	return w, realID
}

// spinContainer is the container pid 100 of writeSpin runs in.
const spinContainer = "4f797c539e6c745de61a93ca3ff892358ecbcaccd8414d5db545c38428142970"

// writeSpin writes a recording of two processes running spin, pid 100
// with spin's real build ID and pid 101 with another one (a binary since
// replaced), 10 samples of each per second for 3 s; pid 100's have a
// kernel stack too, and it runs in a container.
func writeSpin(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	clock := start
	w, realID := newSpinWriter(t, &buf, &clock)
	w.ProcessInContainer(start, 100, "spin", spinContainer, spinMap(t, realID))
	w.Process(start, 101, "old", spinMap(t, []byte{1, 2, 3}))
	kernel := []uint64{0xffffffff81000010, 0xffffffff81000020}
	for i := range 30 {
		clock = start.Add(time.Duration(i) * 100 * time.Millisecond)
		w.Sample(clock, 100, 100, 0, "spin", spinChain, kernel, 0, 1)
		w.Sample(clock, 101, 102, 1, "worker", spinChain, nil, 0, 1)
	}
	clock = clock.Add(100 * time.Millisecond)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// fakeKernel names every kernel address after itself.
type fakeKernel struct{ asked []uint64 }

func (k *fakeKernel) Symbolize(dst []stacks.Frame, addr uint64) []stacks.Frame {
	k.asked = append(k.asked, addr)
	return append(dst, stacks.Frame{Function: fmt.Sprintf("k%x", addr)})
}

// names returns a sample's function names leaf first (the outermost of
// each location's inline frames), "" for an unnamed location.
func names(s *stacks.Sample) []string {
	var out []string
	for _, l := range s.Stack {
		if len(l.Frames) == 0 {
			out = append(out, "")
			continue
		}
		out = append(out, l.Frames[len(l.Frames)-1].Function)
	}
	return out
}

func TestRead(t *testing.T) {
	kernel := &fakeKernel{}
	p, res, err := Read(bytes.NewReader(writeSpin(t)), Options{Symbolizer: symbolize.NewELF(symbolize.Options{}), Kernel: kernel})
	if err != nil {
		t.Fatal(err)
	}
	if res.Samples != 60 || res.Kept != 60 || res.Damaged != 0 || res.Header.Host != "h" {
		t.Errorf("result %+v", res)
	}
	if len(p.Samples) != 2 || p.Period != 100*time.Millisecond || !p.Start.Equal(start) || p.Duration != 3*time.Second {
		t.Fatalf("profile: %d samples, period %v, start %v, duration %v", len(p.Samples), p.Period, p.Start, p.Duration)
	}
	s := p.Samples[0]
	if got, want := names(s), []string{"kffffffff81000010", "kffffffff8100001f", "c", "b", "a", "main"}; !slices.Equal(got, want) {
		t.Errorf("pid 100: %q; want %q", got, want)
	}
	if s.Count != 30 || s.Pid != 100 || s.Comm != "spin" || s.Container != spinContainer {
		t.Errorf("pid 100: count %d, pid %d, comm %q, container %q", s.Count, s.Pid, s.Comm, s.Container)
	}
	// The same file recorded with another build ID: found, but not used.
	s = p.Samples[1]
	if got := names(s); !slices.Equal(got, []string{"", "", "", ""}) {
		t.Errorf("pid 101, another build ID: %q; want unnamed frames", got)
	}
	if s.Container != "" {
		t.Errorf("pid 101, in no container: container %q", s.Container)
	}
	if s.Stack[0].Placeholder() != "spin+0x11c4" || len(res.Missing) != 1 {
		t.Errorf("pid 101: placeholder %q, missing %q", s.Stack[0].Placeholder(), res.Missing)
	}
	kinds := map[stacks.MappingKind]int{}
	for _, m := range p.Mappings {
		kinds[m.Kind]++
	}
	if kinds[stacks.User] != 2 || kinds[stacks.Kernel] != 1 {
		t.Errorf("mappings by kind %v; want 2 user, 1 kernel", kinds)
	}
}

func TestFilters(t *testing.T) {
	data := writeSpin(t)
	for _, c := range []struct {
		name string
		opts Options
		want map[uint32]int64 // samples by pid
	}{
		{"pid", Options{Pids: []uint32{101}}, map[uint32]int64{101: 30}},
		{"thread name", Options{Comms: []string{"worker"}}, map[uint32]int64{101: 30}},
		{"process name", Options{Comms: []string{"old"}}, map[uint32]int64{101: 30}},
		{"window", Options{From: time.Second, To: 1500 * time.Millisecond}, map[uint32]int64{100: 5, 101: 5}},
		{"from", Options{From: 2500 * time.Millisecond, Pids: []uint32{100}}, map[uint32]int64{100: 5}},
		{"nothing", Options{Comms: []string{"nginx"}}, map[uint32]int64{}},
	} {
		p, res, err := Read(bytes.NewReader(data), c.opts)
		if err != nil {
			t.Fatal(err)
		}
		got := map[uint32]int64{}
		for _, s := range p.Samples {
			got[s.Pid] += s.Count
		}
		var kept int64
		for _, n := range c.want {
			kept += n
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) || res.Kept != uint64(kept) || res.Samples != 60 {
			t.Errorf("%s: samples by pid %v, %d kept; want %v", c.name, got, res.Kept, c.want)
		}
		if c.opts.To > 0 && p.Duration != c.opts.To-c.opts.From {
			t.Errorf("%s: duration %v", c.name, p.Duration)
		}
	}
}

// TestDamaged converts a recording cut in its last chunks, as kill -9
// leaves it: the samples before the cut are there, and the damage said.
func TestDamaged(t *testing.T) {
	data := writeSpin(t)
	whole, _, err := Read(bytes.NewReader(data), Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, res, err := Read(bytes.NewReader(data[:len(data)-40]), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Damaged != 1 || res.Kept == 0 || res.Kept >= 60 {
		t.Fatalf("cut recording: damaged %v, %d samples kept", res.Damaged, res.Kept)
	}
	if len(p.Samples) != len(whole.Samples) || p.Duration >= whole.Duration {
		t.Errorf("cut recording: %d samples over %v; whole: %d over %v", len(p.Samples), p.Duration, len(whole.Samples), whole.Duration)
	}
	if _, _, err := Read(bytes.NewReader(data[:10]), Options{}); err == nil {
		t.Error("a recording cut in its header converted")
	}
}

func TestProgress(t *testing.T) {
	data := writeSpin(t)
	var last int64
	calls := 0
	if _, _, err := Read(bytes.NewReader(data), Options{Progress: func(n int64) { last, calls = n, calls+1 }}); err != nil {
		t.Fatal(err)
	}
	if last != int64(len(data)) || calls == 0 {
		t.Errorf("progress ended at %d of %d bytes after %d calls", last, len(data), calls)
	}
}
