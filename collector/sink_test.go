package collector

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"
)

// logSink writes down what a Sink is told, times as offsets from the
// first call's.
type logSink struct {
	log   []string
	first time.Time
	ticks int
}

func (l *logSink) at(t time.Time) time.Duration {
	if l.first.IsZero() {
		l.first = t
	}
	return t.Sub(l.first)
}

func (l *logSink) Process(t time.Time, pid uint32, comm, container string, maps []Mapping) error {
	l.log = append(l.log, fmt.Sprintf("%v process %d %s %q %v", l.at(t), pid, comm, container, maps))
	return nil
}

func (l *logSink) Exit(t time.Time, pid uint32) error {
	l.log = append(l.log, fmt.Sprintf("%v exit %d", l.at(t), pid))
	return nil
}

func (l *logSink) Sample(t time.Time, pid, tid, cpu uint32, comm string, user, kernel []uint64, truncated bool) error {
	l.log = append(l.log, fmt.Sprintf("%v sample %d/%d cpu%d %s %x %x %v", l.at(t), pid, tid, cpu, comm, user, kernel, truncated))
	return nil
}

func (l *logSink) OffCPU(t time.Time, pid, tid, cpu uint32, comm string, user, kernel []uint64, truncated bool, ns uint64) error {
	l.log = append(l.log, fmt.Sprintf("%v off-cpu %v %d/%d cpu%d %s %x %x %v", l.at(t), time.Duration(ns), pid, tid, cpu, comm, user, kernel, truncated))
	return nil
}

func (l *logSink) Tick() error { l.ticks++; return nil }

// TestSink checks that a Sink gets the samples in time order, each
// process's mappings before the samples taken under them, a new record when
// they change, and exits.
func TestSink(t *testing.T) {
	sink := &logSink{}
	c, err := New(Options{Frequency: 99, ProcRoot: t.TempDir(), NoSideband: true, Sink: sink})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.events = []event{
		mmapEvent(1000, 10, 0x1000, 0x3000, 0x4000, "/app", []byte{0xaa}),
		mmapEvent(5000, 10, 0x8000, 0x9000, 0, "/lib.so", nil),
		{time: 7000, kind: eventExit, pid: 10, tid: 10},
	}
	src := &fakeSource{}
	src.add(10, 4000, 0x1000, 0x2000) // out of order: drained in time order
	src.add(10, 2000, 0x1000)
	src.add(10, 6000, 0x8000, 0x2000)
	src.samples[2].CPU, src.samples[2].Kernel, src.samples[2].UserTruncated = 1, []uint64{0xffffffff81000000}, true
	if err := c.Drain(src); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"0s process 10 p10 \"\" [{4096 12288 16384 /app aa}]",
		"0s sample 10/10 cpu0 p10 [1000] [] false",
		"2µs sample 10/10 cpu0 p10 [1000 2000] [] false",
		"4µs process 10 p10 \"\" [{4096 12288 16384 /app aa} {32768 36864 0 /lib.so }]",
		"4µs sample 10/10 cpu1 p10 [8000 2000] [ffffffff81000000] true",
		"5µs exit 10",
	}
	if !slices.Equal(sink.log, want) {
		t.Errorf("sink was told\n%q\nwant\n%q", sink.log, want)
	}
	if sink.ticks != 1 {
		t.Errorf("%d ticks after one drain", sink.ticks)
	}
}

// TestSinkForget: the records no sample to come can need are dropped,
// and a pid whose exit is all that is left is forgotten.
func TestSinkForget(t *testing.T) {
	s := newSinkState(&logSink{})
	s.sent = map[uint32][]sentRecord{
		1: {{time: 10, set: 1}, {time: 20, set: 2}, {time: 30, set: 3}},
		2: {{time: 10, set: 4}, {time: 15, set: 0}},
		3: {{time: 40, set: 5}},
	}
	s.forget(25)
	want := map[uint32][]sentRecord{
		1: {{time: 20, set: 2}, {time: 30, set: 3}},
		3: {{time: 40, set: 5}},
	}
	if !maps.EqualFunc(s.sent, want, slices.Equal) {
		t.Errorf("records kept %v, want %v", s.sent, want)
	}
	for _, tc := range []struct {
		t    uint64
		want int
	}{{5, 0}, {20, 0}, {29, 0}, {30, 1}, {99, 1}} {
		if got := applying(s.sent[1], tc.t); got != tc.want {
			t.Errorf("record applying at %d: %d, want %d", tc.t, got, tc.want)
		}
	}
}

// TestOffCPU: an off-CPU record goes to the Sink as such, and the profile
// adds its time to the stack's OffCPU, beside the CPU samples of the same
// stack in Count.
func TestOffCPU(t *testing.T) {
	sink := &logSink{}
	c, err := New(Options{Frequency: 99, OffCPU: true, ProcRoot: t.TempDir(), NoSideband: true, Sink: sink})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.events = []event{mmapEvent(1000, 10, 0x1000, 0x3000, 0x4000, "/app", []byte{0xaa})}
	src := &fakeSource{}
	src.add(10, 2000, 0x1000, 0x2000)
	src.add(10, 3000, 0x1000, 0x2000)
	src.add(10, 4000, 0x1000, 0x2000)
	src.add(10, 5000, 0x1000, 0x2000)
	src.samples[1].OffCPU, src.samples[3].OffCPU = 3e6, 4e6
	if err := c.Drain(src); err != nil {
		t.Fatal(err)
	}
	if got, want := sink.log[2], "1µs off-cpu 3ms 10/10 cpu0 p10 [1000 2000] [] false"; got != want {
		t.Errorf("sink was told %q, want %q (all: %q)", got, want, sink.log)
	}
	p := c.Profile()
	if !p.OffCPU || len(p.Samples) != 1 || p.Samples[0].Count != 2 || p.Samples[0].OffCPU != 7*time.Millisecond {
		t.Fatalf("profile: off-CPU %v, %d samples, first %+v", p.OffCPU, len(p.Samples), p.Samples[0])
	}
	if _, err := New(Options{Frequency: 0, ProcRoot: t.TempDir(), NoSideband: true}); err == nil {
		t.Error("New accepted frequency 0 without OffCPU")
	}
}
