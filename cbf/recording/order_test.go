package recording

import (
	"bytes"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/sprof/sprof/cbf"
)

// TestOutOfOrder: samples written out of time order — held back past
// later samples, into later chunks, and backwards within a batch — read
// back the same, each under the process record that applies at its time,
// also when the process exited and its pid was reused before they were
// written. FORMAT.md §2: chunks are not in time order.
func TestOutOfOrder(t *testing.T) {
	clock := newFakeClock()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, clock.options())
	if err != nil {
		t.Fatal(err)
	}
	oldMap, newMap := testMap(t, 0x400000), testMap(t, 0x500000)
	write := func(s sample) {
		t.Helper()
		if err := w.Sample(clock.at(s.t), s.pid, s.tid, s.cpu, s.comm, s.user, s.kernel, s.flags, s.weight); err != nil {
			t.Fatal(err)
		}
	}
	at := func(d time.Duration) { clock.t = clock.at(d) }

	// pid 100 runs "old" until it exits at 1 s; at 1.5 s "new" reuses
	// the pid. pid 200 runs throughout.
	var want, held []sample
	w.Process(clock.at(0), 100, "old", oldMap)
	w.Process(clock.at(0), 200, "other", oldMap)
	for i := range 30 {
		d := time.Duration(i) * 100 * time.Millisecond
		at(d)
		if d == time.Second {
			w.Exit(clock.at(d), 100)
		}
		if d == 1500*time.Millisecond {
			w.Process(clock.at(d), 100, "new", newMap)
		}
		if d < time.Second || d >= 1500*time.Millisecond {
			comm := map[bool]string{true: "old", false: "new"}[d < time.Second]
			s := sample{t: d + time.Millisecond, pid: 100, tid: 100, cpu: 0, comm: comm, user: []uint64{0x401000 + uint64(i)}, weight: 1}
			want = append(want, s)
			if d >= 500*time.Millisecond && d < time.Second {
				held = append(held, s) // written at 2 s, after the exit and the reuse
			} else {
				write(s)
			}
		}
		// pid 200: a batch's samples written backwards, ten at a time.
		if i%10 == 9 {
			for j := 9; j >= 0; j-- {
				s := sample{t: d - time.Duration(j)*100*time.Millisecond + 2*time.Millisecond, pid: 200, tid: 201, cpu: 1, comm: "other",
					user: []uint64{0x401234, 0x7f0000029d90}, weight: 1}
				want = append(want, s)
				write(s)
			}
		}
		if d == 2*time.Second {
			for _, s := range held {
				write(s)
			}
		}
	}
	at(3 * time.Second)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	_, got, procs, end, err := readAll(t, buf.Bytes())
	if err != io.EOF {
		t.Fatalf("reading: %v", err)
	}
	// The file really is out of order, across chunks and within one.
	if slices.IsSortedFunc(got, func(a, b sample) int { return int(a.t - b.t) }) {
		t.Fatalf("samples read back in time order; the test writes them out of it")
	}
	if end == nil || end.Samples != uint64(len(want)) {
		t.Errorf("end %+v, want %d samples", end, len(want))
	}
	sortSamples(got)
	sortSamples(want)
	if len(got) != len(want) {
		t.Fatalf("%d samples, want %d", len(got), len(want))
	}
	table := NewProcessTable()
	table.Add(procs)
	for i := range want {
		if got[i].String() != want[i].String() {
			t.Errorf("sample %d: %v, want %v", i, got[i], want[i])
		}
		s := &got[i]
		m, comm := table.Map(s.pid, s.t), table.Comm(s.pid, s.t)
		if s.pid == 100 && (comm != s.comm || !m.Equal(map[bool]*cbf.ImageMap{true: oldMap, false: newMap}[s.comm == "old"])) {
			t.Errorf("pid 100 at %v: process %q with map %v, want %q's", s.t, comm, m, s.comm)
		}
	}

	sum, err := Summarize(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if sum.FirstSample != time.Millisecond || sum.LastSample != 2902*time.Millisecond || sum.Samples != uint64(len(want)) {
		t.Errorf("summary: %d samples from %v to %v; want %d from 1ms to 2.902s", sum.Samples, sum.FirstSample, sum.LastSample, len(want))
	}
}
