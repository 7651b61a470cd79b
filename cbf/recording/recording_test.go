package recording

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sprof/sprof/cbf"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }
func newFakeClock() *fakeClock               { return &fakeClock{time.Unix(1_700_000_000, 0)} }
func (c *fakeClock) options() Options {
	return Options{Clock: c.now, Host: "h", Kernel: "6.18.0", Arch: "x86_64", Frequency: 99}
}
func (c *fakeClock) at(d time.Duration) time.Time { return time.Unix(1_700_000_000, 0).Add(d) }

// sample is one sample as a test writes and expects to read it.
type sample struct {
	t             time.Duration
	pid, tid, cpu uint32
	comm          string
	user, kernel  []uint64
	flags         Flags
	weight        uint64
}

func (s sample) String() string {
	return fmt.Sprintf("%v %d/%d cpu%d %s u%x k%x f%d w%d", s.t, s.pid, s.tid, s.cpu, s.comm, s.user, s.kernel, s.flags, s.weight)
}

func testMap(t testing.TB, base uint64) *cbf.ImageMap {
	t.Helper()
	m, err := cbf.NewImageMap("", cbf.Word64, []cbf.Image{
		{Path: "/usr/bin/app", BuildID: []byte{1, 2, 3, 4}, Base: base, EndOfText: base + 0x10000, TextOffset: 0x1000},
		{Path: "/usr/lib/x86_64-linux-gnu/libc.so.6", BuildID: []byte{5, 6, 7, 8}, Base: 0x7f0000028000, EndOfText: 0x7f00001bd000, TextOffset: 0x28000},
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func kernelMap(t testing.TB) *cbf.ImageMap {
	m, err := cbf.NewImageMap("", cbf.Word64, []cbf.Image{
		{Path: "[kernel.kallsyms]", BuildID: []byte{9, 9}, Base: 0xffffffff81000000, EndOfText: 0xffffffff82000000},
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// testSamples returns samples over a few seconds with repeated stacks and
// repeated whole samples, the way a profiler sees them.
func testSamples() []sample {
	var out []sample
	hot := []uint64{0x401234, 0x401100, 0x7f0000029d90, 0x401085}
	for i := range 300 {
		s := sample{t: time.Duration(i) * 10 * time.Millisecond, pid: 100 + uint32(i%3), tid: 100 + uint32(i%5),
			cpu: uint32(i % 2), comm: []string{"app", "worker"}[i%2], user: hot, weight: 1}
		switch i % 7 {
		case 1:
			s.kernel = []uint64{0xffffffff81001000, 0xffffffff81002000}
		case 2:
			s.user = append(slices.Clone(hot[:2]), uint64(0x402000+i))
		case 3:
			s.user, s.flags = nil, KernelTruncated
			s.kernel = []uint64{0xffffffff81003000}
		case 4:
			s.flags = UserTruncated
		case 5:
			s.weight = 3
		}
		out = append(out, s)
	}
	return out
}

// writeRecording writes a recording of testSamples, a chunk each second,
// and returns it.
func writeRecording(t testing.TB) []byte {
	t.Helper()
	clock := newFakeClock()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, clock.options())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Kernel(kernelMap(t)); err != nil {
		t.Fatal(err)
	}
	for pid := uint32(100); pid < 103; pid++ {
		container := ""
		if pid == 101 {
			container = "c101"
		}
		if err := w.ProcessInContainer(clock.now(), pid, "app", container, testMap(t, 0x400000)); err != nil {
			t.Fatal(err)
		}
	}
	for i, s := range testSamples() {
		clock.t = clock.at(s.t)
		if i == 150 {
			w.Lost(7)
			if err := w.Exit(clock.now(), 102); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Sample(clock.at(s.t), s.pid, s.tid, s.cpu, s.comm, s.user, s.kernel, s.flags, s.weight); err != nil {
			t.Fatal(err)
		}
	}
	clock.advance(time.Millisecond)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Sample(clock.t, 1, 1, 0, "x", nil, nil, 0, 1); !errors.Is(err, ErrClosed) {
		t.Errorf("Sample after Close: %v", err)
	}
	return buf.Bytes()
}

// readAll reads every chunk of a recording and returns the samples, process
// records and End chunk found, and the error that stopped the reading.
func readAll(t testing.TB, data []byte) (Header, []sample, []Process, *End, error) {
	t.Helper()
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		return Header{}, nil, nil, nil, err
	}
	var samples []sample
	var procs []Process
	var end *End
	var frames []cbf.Frame
	stack := func(b *Batch, i int) []uint64 {
		if i < 0 {
			return nil
		}
		frames = b.Stacks.Stack(frames[:0], i)
		var pcs []uint64
		for _, f := range frames {
			if f.Kind != cbf.Truncated {
				pcs = append(pcs, f.Addr)
			}
		}
		return pcs
	}
	for {
		c, err := r.Next()
		if err != nil {
			return r.Header(), samples, procs, end, err
		}
		switch c.Type {
		case ChunkProcesses:
			procs = append(procs, c.Processes()...)
		case ChunkSamples:
			b, err := c.Batch()
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range b.Groups {
				for _, tm := range g.Times {
					samples = append(samples, sample{tm, g.PID, g.TID, g.CPU, g.Comm, stack(b, g.User), stack(b, g.Kernel), g.Flags, g.Weight})
				}
			}
		case ChunkEnd:
			e, err := c.End()
			if err != nil {
				t.Fatal(err)
			}
			end = &e
		}
	}
}

// allChunks reads every chunk of an undamaged recording, failing the test
// on any error but the io.EOF that ends it, so a chunk that stops decoding
// is not mistaken for the end of the recording.
func allChunks(t *testing.T, data []byte) []Chunk {
	t.Helper()
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	var chunks []Chunk
	for {
		c, err := r.Next()
		if err == io.EOF {
			return chunks
		}
		if err != nil {
			t.Fatalf("chunk %d: %v", len(chunks), err)
		}
		chunks = append(chunks, c)
	}
}

func sortSamples(s []sample) {
	slices.SortStableFunc(s, func(a, b sample) int { return int(a.t - b.t) })
}

func TestRoundTrip(t *testing.T) {
	data := writeRecording(t)
	h, got, procs, end, err := readAll(t, data)
	if err != io.EOF {
		t.Fatalf("reading: %v", err)
	}
	if h.Host != "h" || h.Kernel != "6.18.0" || h.Arch != "x86_64" || h.Frequency != 99 || !h.Start.Equal(time.Unix(1_700_000_000, 0)) {
		t.Errorf("header %+v", h)
	}
	want := testSamples()
	sortSamples(got)
	if len(got) != len(want) {
		t.Fatalf("%d samples; want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].String() != want[i].String() {
			t.Fatalf("sample %d:\n%v\nwant\n%v", i, got[i], want[i])
		}
	}
	if len(procs) != 5 || !procs[0].Kernel || !procs[0].Map.Equal(kernelMap(t)) ||
		procs[1].PID != 100 || procs[1].Comm != "app" || !procs[1].Map.Equal(testMap(t, 0x400000)) ||
		procs[1].Container != "" || procs[2].Container != "c101" ||
		!procs[4].Exited || procs[4].PID != 102 || procs[4].Time != 1500*time.Millisecond {
		t.Errorf("process records %+v", procs)
	}
	if end == nil || end.Samples != 300 || end.Lost != 7 || end.Time != 2991*time.Millisecond {
		t.Errorf("end %+v", end)
	}
}

func TestFlushInterval(t *testing.T) {
	clock := newFakeClock()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, clock.options())
	if err != nil {
		t.Fatal(err)
	}
	headerLen := buf.Len()
	pcs := []uint64{0x401000, 0x401234}
	w.Sample(clock.now(), 1, 1, 0, "a", pcs, nil, 0, 1)
	clock.advance(999 * time.Millisecond)
	w.Sample(clock.now(), 1, 1, 0, "a", pcs, nil, 0, 1)
	if buf.Len() != headerLen {
		t.Fatalf("a chunk was written before a second passed")
	}
	clock.advance(time.Millisecond)
	if err := w.Tick(); err != nil {
		t.Fatal(err)
	}
	if buf.Len() == headerLen {
		t.Fatalf("no chunk written after a second")
	}
	// An idle writer writes nothing.
	n := buf.Len()
	clock.advance(5 * time.Second)
	w.Tick()
	if buf.Len() != n {
		t.Errorf("an idle Tick wrote %d bytes", buf.Len()-n)
	}
	// A full batch is written at once.
	w2, _ := NewWriter(io.Discard, Options{Clock: clock.now, MaxBatchBytes: 100})
	var out bytes.Buffer
	w2.w = &out
	for i := range 10 {
		w2.Sample(clock.now(), uint32(i), 1, 0, "a", []uint64{uint64(i) << 40, 0x401234}, nil, 0, 1)
	}
	if out.Len() == 0 {
		t.Error("a batch over MaxBatchBytes was not written")
	}
}

func TestDedup(t *testing.T) {
	clock := newFakeClock()
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, clock.options())
	stack := make([]uint64, 40)
	for i := range stack {
		stack[i] = 0x401000 + uint64(i*0x1234)
	}
	for i := range 100 {
		w.Sample(clock.at(time.Duration(i)*time.Millisecond), 1, 1, 0, "a", stack, nil, 0, 1)
		w.Sample(clock.at(time.Duration(i)*time.Millisecond), 2, 2, 1, "b", stack, nil, 0, 1)
	}
	w.Flush()
	r, _ := NewReader(bytes.NewReader(buf.Bytes()))
	if c, err := r.Next(); err != nil || c.Type != ChunkTables {
		t.Fatalf("%v chunk, %v; want the tables", c.Type, err)
	}
	if c, err := r.Next(); err != nil || c.Type != ChunkStacks {
		t.Fatalf("%v chunk, %v; want the stacks", c.Type, err)
	}
	c, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Batch()
	if err != nil {
		t.Fatal(err)
	}
	if b.Stacks.Len() != 1 || len(b.Groups) != 2 || b.Samples() != 200 {
		t.Errorf("%d stacks, %d groups, %d samples; want 1, 2, 200", b.Stacks.Len(), len(b.Groups), b.Samples())
	}
	// A repeated sample costs only its time: 1ms in ns is a 3-byte varint.
	if perSample := float64(len(c.Payload)) / 200; perSample > 4 {
		t.Errorf("%.1f bytes per repeated sample", perSample)
	}
}

// chunkEnds returns the offsets where the chunks of an intact recording end.
func chunkEnds(t testing.TB, data []byte) []int {
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	ends := []int{int(r.Offset())}
	for {
		if _, err := r.Next(); err != nil {
			return ends
		}
		ends = append(ends, int(r.Offset()))
	}
}

// TestTruncateEveryByte cuts a recording at every byte, as kill -9 or a
// full disk would, and checks that every chunk before the cut is read and
// the damaged tail is reported where the cut chunk starts.
func TestTruncateEveryByte(t *testing.T) {
	data := writeRecording(t)
	ends := chunkEnds(t, data)
	if len(ends) < 6 {
		t.Fatalf("only %d chunks", len(ends))
	}
	for cut := range len(data) + 1 {
		r, err := NewReader(bytes.NewReader(data[:cut]))
		if cut < ends[0] {
			if err == nil {
				t.Fatalf("cut at %d: header read", cut)
			}
			continue
		}
		if err != nil {
			t.Fatalf("cut at %d: %v", cut, err)
		}
		complete := 0
		for complete+1 < len(ends) && ends[complete+1] <= cut {
			complete++
		}
		n := 0
		for {
			_, err = r.Next()
			if err != nil {
				break
			}
			n++
		}
		if n != complete || err != io.EOF {
			t.Fatalf("cut at %d: read %d chunks, then %v; want %d and EOF", cut, n, err, complete)
		}
		damage, count := r.Damage()
		switch {
		case cut == ends[complete]:
			if count != 0 {
				t.Fatalf("cut at %d, a chunk boundary: damage %v", cut, damage[0])
			}
		case count != 1 || damage[0].Offset != int64(ends[complete]) || damage[0].End != int64(cut):
			t.Fatalf("cut at %d: damage %v; want one stretch from %d to the end", cut, damage, ends[complete])
		}
	}
}

// writeFlushes writes a recording of several flushes, each with a new
// process of a map of its own, new stacks that extend those before, and
// samples of every process so far: each flush's chunks define table
// entries that later ones refer to.
func writeFlushes(t testing.TB) []byte {
	t.Helper()
	clock := newFakeClock()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, clock.options())
	if err != nil {
		t.Fatal(err)
	}
	w.Kernel(kernelMap(t))
	for f := range 8 {
		pid := uint32(100 + f)
		w.Process(clock.now(), pid, fmt.Sprintf("p%d", f), testMap(t, 0x400000+uint64(f)<<24))
		for i := range 20 {
			for p := uint32(100); p <= pid; p++ {
				stack := []uint64{0x401000 + uint64(i%4)*0x10 + uint64(f)<<24, 0x402000 + uint64(f)<<24, 0x7f0000029d90, 0x401085}
				w.Sample(clock.now(), p, p, uint32(i%2), "", stack, nil, 0, 1)
			}
			clock.advance(time.Millisecond)
		}
		if f == 5 {
			w.Exit(clock.now(), 101)
		}
		w.Flush()
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// readChunks reads a recording whole: the offsets of the chunks read, the
// samples placed (pid, stack and map as text) and the process records, and
// the number of samples left out because they refer to what damage lost.
func readChunks(t *testing.T, data []byte) (offsets []int64, samples map[string]int, procs []string, unplaced int, r *Reader) {
	t.Helper()
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	samples = map[string]int{}
	pt := NewProcessTable()
	var frames []cbf.Frame
	for {
		c, err := r.Next()
		if err == io.EOF {
			return offsets, samples, procs, unplaced, r
		}
		if err != nil {
			t.Fatalf("a chunk after damage is malformed: %v", err)
		}
		offsets = append(offsets, c.Offset)
		switch c.Type {
		case ChunkProcesses:
			pt.Add(c.Processes())
			for _, pr := range c.Processes() {
				m := "no map"
				switch {
				case pr.Damaged:
					m = "damaged"
				case pr.Map != nil:
					m = pr.Map.String()
				}
				procs = append(procs, fmt.Sprintf("%d %s %v %s", pr.PID, pr.Comm, pr.Exited, m))
			}
		case ChunkSamples:
			b, err := c.Batch()
			if err != nil {
				t.Fatalf("samples chunk at %d: %v", c.Offset, err)
			}
			for i := range b.Groups {
				g := &b.Groups[i]
				if _, n := r.Damage(); b.Unplaced(g) || pt.Damaged(g.PID, g.Times[0]) || n > 0 && pt.Missing(g.PID, g.Times[0]) {
					unplaced += len(g.Times)
					continue
				}
				frames = frames[:0]
				if g.User >= 0 {
					frames = b.Stacks.Stack(frames, g.User)
				}
				samples[fmt.Sprintf("%d %v", g.PID, frames)] += len(g.Times)
				if m := pt.Map(g.PID, g.Times[0]); m != nil {
					// Which map, of those written for the pid: a lost
					// exit record leaves the one before it applying.
					samples[fmt.Sprintf("%d map %#x", g.PID, m.Image(0).Base)] += len(g.Times)
				}
			}
		}
	}
}

// TestFlipEveryByte flips each byte after the header of a recording in
// turn. Every chunk but the damaged one must be read, or all of them when
// the CRC repairs the damage; what is read must be what was written:
// samples and process records that refer to what the damaged chunk
// defined are marked, never shown with other stacks or maps.
func TestFlipEveryByte(t *testing.T) {
	for _, fixture := range []struct {
		name string
		data []byte
	}{{"writeRecording", writeRecording(t)}, {"writeFlushes", writeFlushes(t)}} {
		data := fixture.data
		ends := chunkEnds(t, data)
		wantOffsets, wantSamples, wantProcs, _, _ := readChunks(t, data)
		total := 0
		for k, n := range wantSamples {
			if !strings.Contains(k, " map ") {
				total += n
			}
		}
		for at := ends[0]; at < len(data); at++ {
			bad := slices.Clone(data)
			bad[at] ^= 0x55
			offsets, samples, procs, unplaced, r := readChunks(t, bad)
			chunk := 0
			for ends[chunk+1] <= at {
				chunk++
			}
			damage, count := r.Damage()
			repaired := count == 1 && strings.Contains(damage[0].Reason, "repaired")
			var want []int64
			for _, off := range wantOffsets {
				if off != int64(ends[chunk]) || repaired {
					want = append(want, off)
				}
			}
			if !slices.Equal(offsets, want) || count != 1 || damage[0].Offset != int64(ends[chunk]) {
				t.Fatalf("%s, byte %d flipped: read chunks %v, damage %v; want %v and the damage at %d",
					fixture.name, at, offsets, damage, want, ends[chunk])
			}
			placed := 0
			for k, n := range samples {
				if _, ok := wantSamples[k]; !ok {
					t.Fatalf("%s, byte %d flipped: %d samples %s, none written", fixture.name, at, n, k)
				}
				if !strings.Contains(k, " map ") {
					placed += n
				}
			}
			for _, pr := range procs {
				if !slices.Contains(wantProcs, pr) && !strings.HasSuffix(pr, " damaged") {
					t.Fatalf("%s, byte %d flipped: process record %s was not written", fixture.name, at, pr)
				}
			}
			if placed+unplaced > total || repaired && placed != total {
				t.Fatalf("%s, byte %d flipped: %d samples placed and %d unplaced, of %d written", fixture.name, at, placed, unplaced, total)
			}
		}
	}
}

func TestUnknownChunkSkipped(t *testing.T) {
	data := writeRecording(t)
	ends := chunkEnds(t, data)
	var withNew []byte
	withNew = append(withNew, data[:ends[2]]...)
	withNew = appendChunk(withNew, 200, []byte("from a newer sprof"))
	withNew = append(withNew, data[ends[2]:]...)
	s, err := Summarize(bytes.NewReader(withNew))
	if err != nil {
		t.Fatal(err)
	}
	if s.Unknown != 1 || s.Samples != 300 || s.Damaged != 0 {
		t.Errorf("summary %+v", s)
	}
}

func TestSummarize(t *testing.T) {
	data := writeRecording(t)
	s, err := Summarize(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if s.Samples != 300 || s.Lost != 7 || s.Processes != 3 || s.Images != 3 || s.End == nil ||
		s.Duration() != 2991*time.Millisecond || s.Intact != int64(len(data)) || s.Damaged != 0 {
		t.Errorf("summary %+v", s)
	}
	var total int64
	for _, n := range s.Bytes {
		total += n
	}
	if total != int64(len(data)-len(Magic)) || s.Bytes[ChunkStacks] == 0 || s.Bytes[ChunkSamples] == 0 || s.Bytes[ChunkHeader] != 36 {
		t.Errorf("bytes by chunk type %v, %d in all; want the %d bytes after the magic", s.Bytes, total, len(data)-len(Magic))
	}
	s, err = Summarize(bytes.NewReader(data[:len(data)-3]))
	if err != nil {
		t.Fatal(err)
	}
	if s.End != nil || s.Damaged != 1 || s.Duration() != 2990*time.Millisecond || s.Samples != 300 {
		t.Errorf("summary of a cut file %+v", s)
	}
}

// failingWriter fails once it has taken n bytes, like a full disk.
type failingWriter struct{ n int }

func (f *failingWriter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		k := f.n
		f.n = 0
		return k, errors.New("no space left on device")
	}
	f.n -= len(p)
	return len(p), nil
}

func TestWriteErrorSticks(t *testing.T) {
	clock := newFakeClock()
	w, err := NewWriter(&failingWriter{n: 100}, clock.options())
	if err != nil {
		t.Fatal(err)
	}
	w.Sample(clock.now(), 1, 1, 0, "a", []uint64{1, 2, 3}, nil, 0, 1)
	w.Process(clock.now(), 1, "a", testMap(t, 0x400000))
	if err := w.Flush(); err == nil {
		t.Fatal("Flush succeeded on a full disk")
	}
	if err := w.Sample(clock.now(), 1, 1, 0, "a", nil, nil, 0, 1); err == nil {
		t.Error("Sample succeeded after a write error")
	}
}

func TestNotARecording(t *testing.T) {
	for _, data := range [][]byte{nil, []byte("\x89sprof\r"), []byte("hello, world"), append([]byte(Magic), appendChunk(nil, ChunkSamples, nil)...)} {
		if _, err := NewReader(bytes.NewReader(data)); err == nil {
			t.Errorf("NewReader(%q) succeeded", data)
		}
	}
}

// TestFormatExample checks the example of cbf/FORMAT.md §8 byte for byte,
// so the specification and the code cannot drift apart.
func TestFormatExample(t *testing.T) {
	doc, err := os.ReadFile("../FORMAT.md")
	if err != nil {
		t.Fatal(err)
	}
	_, example, _ := strings.Cut(string(doc), "## 8. Example")
	_, example, _ = strings.Cut(example, "```\n")
	example, _, _ = strings.Cut(example, "```")
	var want []byte
	for _, line := range strings.Split(example, "\n") {
		for _, tok := range strings.Fields(line) {
			b, err := hex.DecodeString(tok)
			if err != nil || len(b) != 1 {
				break // the comment
			}
			want = append(want, b[0])
		}
	}
	start := time.Unix(1_700_000_000, 0)
	var buf bytes.Buffer
	w, err := NewWriter(&buf, Options{Host: "h1", Kernel: "6.18.0", Arch: "x86_64", Frequency: 99, Start: start,
		Clock: func() time.Time { return start }})
	if err != nil {
		t.Fatal(err)
	}
	w.Sample(start.Add(10*time.Millisecond), 42, 42, 0, "ap", []uint64{0x401234, 0x401100}, nil, 0, 1)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Errorf("writer:\n% x\nFORMAT.md:\n% x", buf.Bytes(), want)
	}
	_, samples, _, _, err := readAll(t, want)
	if err != io.EOF || len(samples) != 1 || samples[0].String() != "10ms 42/42 cpu0 ap u[401234 401100] k[] f0 w1" {
		t.Errorf("read %v, %v", samples, err)
	}
}

func TestProcessTable(t *testing.T) {
	_, _, procs, _, _ := readAll(t, writeRecording(t))
	table := NewProcessTable()
	table.Add(procs)
	m := testMap(t, 0x400000)
	for _, c := range []struct {
		pid  uint32
		at   time.Duration
		want *cbf.ImageMap
	}{
		{100, 0, m},
		{100, time.Hour, m},
		{102, time.Second, m},
		{102, 1500 * time.Millisecond, nil}, // exited
		{999, 0, nil},
	} {
		got := table.Map(c.pid, c.at)
		if (got == nil) != (c.want == nil) || got != nil && !got.Equal(c.want) {
			t.Errorf("Map(%d, %v) = %v; want %v", c.pid, c.at, got, c.want)
		}
	}
	if c := table.Container(101, time.Second) + "," + table.Container(100, time.Second) + "," + table.Container(999, 0); c != "c101,," {
		t.Errorf("containers of 101, 100, 999: %s", c)
	}
	if k := table.Kernel(time.Second); k == nil || !k.Equal(kernelMap(t)) {
		t.Errorf("Kernel = %v", k)
	}
	// Records apply by time, whatever order they arrive in.
	late := NewProcessTable()
	late.Add([]Process{{PID: 7, Time: 2 * time.Second, Comm: "new"}})
	late.Add([]Process{{PID: 7, Time: time.Second, Comm: "old"}})
	if got := late.Comm(7, 1500*time.Millisecond) + late.Comm(7, 0) + late.Comm(7, 3*time.Second); got != "oldoldnew" {
		t.Errorf("Comm by time: %q", got)
	}
}

func TestNamesNotUTF8(t *testing.T) {
	clock := newFakeClock()
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, Options{Clock: clock.now, Host: "h\xff"})
	w.Sample(clock.now(), 1, 1, 0, "bad\xfe\xffcomm", []uint64{1}, nil, 0, 1)
	w.Sample(clock.now(), 2, 2, 0, strings.Repeat("x", 5000), []uint64{1}, nil, 0, 1)
	w.Close()
	h, samples, _, _, err := readAll(t, buf.Bytes())
	if err != io.EOF || len(samples) != 2 || h.Host != "h\uFFFD" || samples[0].comm != "bad\uFFFDcomm" || len(samples[1].comm) != maxString {
		t.Errorf("host %q, samples %v, %v", h.Host, samples, err)
	}
}

// TestRoundTripExtremes writes samples at the edges of every field: times
// before the start and within a microsecond, pids and cpus at their limits,
// addresses whose differences span the address space, weights of 0 and
// 2^64−1, an empty truncated stack.
func TestRoundTripExtremes(t *testing.T) {
	far := []uint64{0x7fffffffffff0000, 0x10, 0xc000000000000000, 0x10, 0xffffffffffffffff}
	want := []sample{
		{t: -5 * time.Millisecond, pid: 0, tid: math.MaxUint32, cpu: math.MaxUint32, comm: "a", user: far, weight: 0},
		{t: 1500 * time.Nanosecond, pid: math.MaxUint32, tid: 0, cpu: 0, comm: "b", user: far[1:], kernel: far[2:], weight: math.MaxUint64},
		{t: 1700 * time.Nanosecond, pid: math.MaxUint32, tid: 0, cpu: 0, comm: "b", user: far[1:], kernel: far[2:], weight: math.MaxUint64},
		{t: time.Hour, pid: 1, tid: 1, cpu: 3, comm: "", flags: UserTruncated | KernelTruncated, weight: 1},
		{t: time.Hour, pid: 1, tid: 1, cpu: 3, comm: "", user: far[:1], flags: UserTruncated, weight: 1},
	}
	clock := newFakeClock()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, clock.options())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range want {
		if err := w.Sample(clock.at(s.t), s.pid, s.tid, s.cpu, s.comm, s.user, s.kernel, s.flags, s.weight); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	_, got, _, _, err := readAll(t, buf.Bytes())
	if err != io.EOF {
		t.Fatal(err)
	}
	sortSamples(got)
	// Times are kept to the microsecond.
	want[1].t, want[2].t = time.Microsecond, time.Microsecond
	if len(got) != len(want) {
		t.Fatalf("%d samples; want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].String() != want[i].String() {
			t.Errorf("sample %d:\n%v\nwant\n%v", i, got[i], want[i])
		}
	}
}

// TestOffCPUChunk: off-CPU records go into chunks of their own, which the
// summary counts apart from the samples.
func TestOffCPUChunk(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1_700_000_000, 0)
	w, err := NewWriter(&buf, Options{Frequency: 99, Start: now, Clock: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	user, kernel := []uint64{0x401000, 0x402000}, []uint64{0xffffffff81000000}
	if err := w.Sample(now.Add(time.Millisecond), 10, 11, 0, "app", user, nil, 0, 1); err != nil {
		t.Fatal(err)
	}
	for i, ns := range []uint64{5e6, 5e6, 2e6} {
		if err := w.OffCPU(now.Add(time.Duration(i+2)*time.Millisecond), 10, 11, 1, "app", user, kernel, 0, ns); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.OffCPU(now, 10, 11, 1, "app", user, kernel, 0, 0); err == nil {
		t.Error("an off-CPU record of 0 ns was accepted")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := Summarize(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if s.Samples != 1 || s.OffCPU != 3 || s.OffCPUTime != 12*time.Millisecond || s.Unknown != 0 || s.End == nil || s.End.Samples != 1 {
		t.Errorf("summary %+v", s)
	}
	var types []ChunkType
	for _, c := range allChunks(t, buf.Bytes()) {
		types = append(types, c.Type)
		if c.Type == ChunkOffCPU {
			b, err := c.Batch()
			if err != nil || len(b.Groups) != 2 || b.Lost != 0 {
				t.Errorf("off-CPU batch %+v (%v)", b, err)
			}
		}
	}
	if !slices.Contains(types, ChunkOffCPU) || !slices.Contains(types, ChunkSamples) {
		t.Errorf("chunk types %v", types)
	}
}
