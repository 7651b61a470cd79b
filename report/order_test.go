package report

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sprof/sprof/stacks"
	"github.com/sprof/sprof/symbolize"
)

// writeReuse writes a recording of spin as pid 100 until it exits at 1 s,
// a replaced spin (another build ID) reusing pid 100 from 1.5 s, and a
// worker, pid 101, throughout; 10 samples a second each for 3 s. With
// late, pid 100's samples from 0.5 s to 1 s are written at 2 s, after the
// exit and the reuse, as sprof writes samples held back for an unwind
// table, and each second's worker samples backwards.
func writeReuse(t *testing.T, late bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	clock := start
	w, realID := newSpinWriter(t, &buf, &clock)
	w.Process(start, 100, "spin", spinMap(t, realID))
	w.Process(start, 101, "worker", spinMap(t, realID))
	var held, workers []time.Time
	for i := range 30 {
		clock = start.Add(time.Duration(i) * 100 * time.Millisecond)
		switch d := clock.Sub(start); {
		case d == time.Second:
			w.Exit(clock, 100)
		case d == 1500*time.Millisecond:
			w.Process(clock, 100, "spun", spinMap(t, []byte{1, 2, 3}))
		case d == 2*time.Second:
			for _, at := range held {
				w.Sample(at, 100, 100, 0, "spin", spinChain, nil, 0, 1)
			}
		}
		switch d := clock.Sub(start); {
		case d >= time.Second && d < 1500*time.Millisecond:
		case late && d >= 500*time.Millisecond && d < time.Second:
			held = append(held, clock)
		case d < time.Second:
			w.Sample(clock, 100, 100, 0, "spin", spinChain, nil, 0, 1)
		default:
			w.Sample(clock, 100, 100, 0, "spun", spinChain, nil, 0, 1)
		}
		workers = append(workers, clock.Add(time.Millisecond))
		if i%10 == 9 || !late {
			if late {
				slices.Reverse(workers)
			}
			for _, at := range workers {
				w.Sample(at, 101, 102, 1, "worker", spinChain, nil, 0, 1)
			}
			workers = workers[:0]
		}
	}
	clock = clock.Add(100 * time.Millisecond)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// profileOf describes a profile's samples, sorted: the order of a
// profile's samples is that of first sight in the file.
func profileOf(p *stacks.Profile) []string {
	var out []string
	for _, s := range p.Samples {
		out = append(out, fmt.Sprintf("pid %d/%d %s ×%d %q", s.Pid, s.Tid, s.Comm, s.Count, names(s)))
	}
	slices.Sort(out)
	return append(out, fmt.Sprintf("start %v, duration %v", p.Start, p.Duration))
}

// TestFileOrder: a recording whose samples are out of time order — held
// back past an exit and a reuse of their pid, and backwards within a
// batch — converts, with and without filters, to the profile of the same
// samples written in time order.
func TestFileOrder(t *testing.T) {
	inOrder, outOfOrder := writeReuse(t, false), writeReuse(t, true)
	for _, c := range []struct {
		name string
		opts Options
	}{
		{"all", Options{}},
		{"window", Options{From: 700 * time.Millisecond, To: 1600 * time.Millisecond}},
		{"process name", Options{Comms: []string{"spin"}}},
		{"pid", Options{Pids: []uint32{100}}},
	} {
		read := func(data []byte) ([]string, *Result) {
			opts := c.opts
			opts.Symbolizer = symbolize.NewELF(symbolize.Options{})
			p, res, err := Read(bytes.NewReader(data), opts)
			if err != nil {
				t.Fatal(err)
			}
			return profileOf(p), res
		}
		want, wantRes := read(inOrder)
		got, res := read(outOfOrder)
		if !slices.Equal(got, want) || res.Kept != wantRes.Kept {
			t.Errorf("%s: out of order, %d kept:\n%q\nwant, as in order, %d kept:\n%q", c.name, res.Kept, got, wantRes.Kept, want)
		}
		if c.name == "all" && !slices.Contains(want, `pid 100/100 spin ×10 ["c" "b" "a" "main"]`) {
			t.Errorf("spin's samples are not named under spin's build ID: %q", want)
		}
	}
}
