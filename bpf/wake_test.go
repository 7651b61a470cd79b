package bpf

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf/ringbuf"
	"github.com/sprof/sprof/internal/proctime"
	"github.com/sprof/sprof/internal/testenv"
)

// The backlog gives back what it was given, in order, 8-byte aligned
// whatever the records' lengths, and counts what does not fit as lost.
func TestBacklogRoundTrip(t *testing.T) {
	var recs [][]byte
	for i, n := range []int{0, 1, 13, 4096, 7} {
		stack := bytes.Repeat([]byte{byte(i + 1)}, n)
		recs = append(recs, makeCopyRecord(i, i+1, stack))
	}
	size := 0
	for _, r := range recs {
		size += backlogHeader + (len(r)+7)&^7
	}
	b := backlog{max: size + 7} // room for all, not for one more
	for _, r := range recs {
		b.add(r)
	}
	b.add(recs[0])
	if b.lost.Load() != 1 || b.spilled.Load() != uint64(len(recs)) {
		t.Fatalf("lost %d, spilled %d; want 1 and %d", b.lost.Load(), b.spilled.Load(), len(recs))
	}
	var s Sample
	i := 0
	n, err := b.read(&s, func(x *Sample) {
		if i >= len(recs) {
			t.Fatalf("more records than the %d added", len(recs))
		}
		var want Sample
		if err := want.decode(recs[i]); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(x.Kernel, want.Kernel) || !slices.Equal(x.User, want.User) || !bytes.Equal(x.StackCopy, want.StackCopy) {
			t.Errorf("record %d: kernel %v user %v %d stack bytes; want %v %v %d", i,
				x.Kernel, x.User, len(x.StackCopy), want.Kernel, want.User, len(want.StackCopy))
		}
		if len(x.User) > 0 && uintptr(unsafe.Pointer(&x.User[0]))%8 != 0 {
			t.Errorf("record %d: frames not 8-byte aligned in the backlog", i)
		}
		i++
	})
	if err != nil || n != len(recs) {
		t.Fatalf("read %d records, %v; want %d", n, err, len(recs))
	}
	if n, _ := b.read(&s, func(*Sample) { t.Error("a record read twice") }); n != 0 {
		t.Errorf("second read handed %d records", n)
	}
}

// A reader that drains when Ready says so is woken before the ring is half
// full and keeps up without losses, and is not woken per sample: 16 KiB
// copies of two busy processes at 499 Hz in the default ring.
func TestReadyBeforeHalfFull(t *testing.T) {
	requireFixture(t)
	f1, _ := startBinary(t, nofpPath, "deep")
	f2, _ := startBinary(t, nofpPath, "deep")
	s := openSampler(t, Config{Frequency: 499, Pids: []uint32{uint32(f1.Process.Pid), uint32(f2.Process.Pid)},
		User: true, Kernel: true, StackCopy: 16 << 10, CopyAll: true})
	var avail []int // ring contents at each Ready
	samples := 0
	// 30 wakeups take a fraction of a second of the fixtures' CPU time;
	// give up after 20 s of it, however long a loaded host takes.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	start, _ := filterCPU(t, s)
	for len(avail) < 30 {
		select {
		case <-s.Ready():
		case <-tick.C:
			if ran, running := filterCPU(t, s); !running || ran-start >= 20*time.Second {
				t.Fatalf("Ready received %d times in %v of the fixtures' CPU time, %d samples", len(avail), ran-start, samples)
			}
			continue
		}
		avail = append(avail, s.reader.AvailableBytes())
		if _, err := s.Read(func(*Sample) { samples++ }); err != nil {
			t.Fatal(err)
		}
	}
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	lost, err := s.Lost()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(avail)
	t.Logf("%d samples, %d wakeups, ring %d KiB, contents at wakeup %d..%d KiB (median %d), %d spilled, %d lost",
		samples, len(avail), st.RingSize>>10, avail[0]>>10, avail[len(avail)-1]>>10, avail[len(avail)/2]>>10, st.Spilled, lost)
	if median := avail[len(avail)/2]; median >= st.RingSize/2 {
		t.Errorf("the ring held %d bytes at the median wakeup, half of the %d-byte ring or more", median, st.RingSize)
	}
	// A quarter ring holds over 20 records of 16 KiB at least.
	if perSample := len(avail) * 4; perSample > samples {
		t.Errorf("%d wakeups for %d samples: woken per sample or nearly", len(avail), samples)
	}
	if lost != 0 {
		t.Errorf("%d samples lost", lost)
	}
	if st.Sent < uint64(samples) {
		t.Errorf("Stats.Sent %d, but %d samples were read", st.Sent, samples)
	}
}

// A reader that does not read for seconds loses nothing: the Sampler moves
// the records out of its small ring into the backlog, and Read hands them
// over first, in order.
func TestBacklogKeepsSlowReaderSamples(t *testing.T) {
	requireFixture(t)
	f1, _ := startBinary(t, nofpPath, "deep")
	f2, _ := startBinary(t, nofpPath, "deep")
	// 63 records: spilled at half, with 30 records (150 ms at 99 Hz on two
	// CPUs) for the Sampler's goroutine to wake in on a busy host. The
	// test waits, without reading, until the program has sent six rings'
	// worth: 384 samples, about 2 s of each fixture's CPU time, however
	// long a loaded host takes to give them that.
	ring := 1 << 20
	s := openSampler(t, Config{Frequency: 99, Pids: []uint32{uint32(f1.Process.Pid), uint32(f2.Process.Pid)},
		User: true, Kernel: true, StackCopy: 16 << 10, CopyAll: true, RingBufferSize: ring})
	want := uint64(6 * ring / (16 << 10))
	var sent uint64
	proctime.Until(t, f1.Process.Pid, 10*time.Second, fmt.Sprintf("%d samples sent", want), func() bool {
		st, err := s.Stats()
		if err != nil {
			t.Fatal(err)
		}
		sent = st.Sent
		return sent >= want
	})
	last := map[uint32]uint64{} // time of the last sample per CPU
	samples, backwards := 0, 0
	if _, err := s.Read(func(x *Sample) {
		samples++
		if x.Time < last[x.CPU] {
			backwards++
		}
		last[x.CPU] = x.Time
	}); err != nil {
		t.Fatal(err)
	}
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	lost, err := s.Lost()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d samples, %d spilled, %d lost", samples, st.Spilled, lost)
	if st.Spilled == 0 || samples*16<<10 < 2*ring {
		t.Errorf("%d samples, %d spilled: the %d-byte ring was never spilled", samples, st.Spilled, ring)
	}
	if lost != 0 {
		t.Errorf("%d samples lost", lost)
	}
	if backwards != 0 {
		t.Errorf("%d samples older than the one before them on their CPU", backwards)
	}
}

// A full backlog counts its losses like a full ring.
func TestBacklogLoss(t *testing.T) {
	requireFixture(t)
	f1, _ := startBinary(t, nofpPath, "deep")
	s := openSampler(t, Config{Frequency: 499, Pids: []uint32{uint32(f1.Process.Pid)},
		User: true, Kernel: true, StackCopy: 16 << 10, CopyAll: true, RingBufferSize: 256 << 10, Backlog: 64 << 10})
	// The ring may lose records first, while the Sampler's goroutine
	// waits for a CPU to spill it in; the first spill then overflows the
	// backlog.
	waitSampled(t, s, 5*time.Second, func() bool { return s.backlog.lost.Load() > 0 })
	if lost, spilled := s.backlog.lost.Load(), s.backlog.spilled.Load(); lost == 0 || spilled == 0 {
		t.Fatalf("the backlog lost %d records, took %d; want both > 0 with 64 KiB and no reads", lost, spilled)
	}
}

// Read after Close is an error, not a crash: a collector may drain once
// more while its sampler is being closed. So are the calls that change
// the pid filter and the marks, and a second Close does nothing.
func TestReadAfterClose(t *testing.T) {
	requireBPF(t)
	self := uint32(os.Getpid())
	s, err := Open(Config{Frequency: 99, User: true, Pids: []uint32{self}, StackCopy: 4096, Python: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read(func(*Sample) {}); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Read after Close: %v, want os.ErrClosed", err)
	}
	// The collector unmarks the processes it follows as it closes, after
	// the Sampler: errors, not writes into memory unmapped.
	for name, err := range map[string]error{
		"AddPid":    s.AddPid(self),
		"SetCopy":   s.SetCopy(self, false),
		"SetGo":     s.SetGo(self, nil),
		"SetPython": s.SetPython(self, nil),
	} {
		if !errors.Is(err, os.ErrClosed) {
			t.Errorf("%s after Close: %v, want os.ErrClosed", name, err)
		}
	}
	if err := s.PythonNamed(self, 0x1000); err == nil {
		t.Error("PythonNamed after Close: no error")
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// busyRing is a ring whose producer writes a record for every one read,
// as the programs do on a host where the reader cannot keep up: it is
// never empty.
type busyRing struct {
	lengths []int // of the records in the ring, oldest first
	read    int
}

func (r *busyRing) ReadInto(rec *ringbuf.Record) error {
	l := r.lengths[r.read]
	rec.RawSample = bytes.Repeat([]byte{byte(r.read)}, l)
	r.read++
	rec.Remaining = 0 // what the reader saw in the ring as it read this record
	for _, l := range r.lengths[r.read:] {
		rec.Remaining += ringRecordHeader + (l+7)&^7
	}
	r.lengths = append(r.lengths, 8+r.read%13) // the producer's next
	return nil
}

// drainRing hands out the records that were in the ring when it began,
// in order, and returns although the ring never empties: a Read or a
// spill that ran until the ring was empty kept the collector from ever
// seeing the recording's end (sprof record -F 50000 under load ran 30 s
// for -d 3s).
func TestDrainRingEndsWhatWasThere(t *testing.T) {
	ring := &busyRing{lengths: []int{0, 1, 376, 8, 4095}}
	var rec ringbuf.Record
	var got []int
	err := drainRing(ring, &rec, func(raw []byte) error {
		if len(got) > 100 {
			t.Fatal("drainRing is still reading after 100 records")
		}
		got = append(got, len(raw))
		return nil
	})
	if want := []int{0, 1, 376, 8, 4095}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("handed records of %v bytes, %v; want %v, nil", got, err, want)
	}

	// fn's error ends the drain, as is.
	stop := errors.New("undecodable")
	n := 0
	err = drainRing(ring, &rec, func([]byte) error { n++; return stop })
	if !errors.Is(err, stop) || n != 1 {
		t.Errorf("after fn's error: %d records handed, %v", n, err)
	}
}

// TestExecWakes: a sampled process that execs wakes the reader at its
// next sample (Ready), not when the ring is a quarter full, so that user
// space looks at the new program at once (its Python frames, its tables).
// A shell execs the fixture when told; the 64 MiB ring would take minutes
// of samples at 99 Hz to fill a quarter.
func TestExecWakes(t *testing.T) {
	requireFixture(t)
	sh := testenv.RequireTool(t, "sh")
	cmd, stdin := startBinary(t, sh, "-c", `read go && exec "$0" chain`, fixturePath)
	s := openSampler(t, Config{Frequency: 99, User: true, Pids: []uint32{uint32(cmd.Process.Pid)}, RingBufferSize: 64 << 20})
	select {
	case <-s.Ready(): // nothing to wait for: the shell sleeps in read
	default:
	}
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for woken := false; !woken; {
		select {
		case <-s.Ready():
			woken = true
		case <-tick.C:
			if ran, running := filterCPU(t, s); !running || ran >= 5*time.Second {
				t.Fatalf("not woken after the exec, in %v of the fixture's CPU time", ran)
			}
		}
	}
	n, err := s.Read(func(*Sample) {})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Error("woken with no sample in the ring")
	}
	t.Logf("woken with %d samples in the ring", n)
}
