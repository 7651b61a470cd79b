package recording

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// randomStacks returns stacks that share their outer frames the way real
// ones do: a few roots, paths from them, leaves that vary, some recursion,
// some truncated.
func randomStacks(rng *rand.Rand, n int) []sample {
	roots := make([][]uint64, 4)
	for i := range roots {
		for range 3 + rng.IntN(20) {
			roots[i] = append(roots[i], 0x400000+rng.Uint64N(1<<20))
		}
	}
	out := make([]sample, n)
	for i := range out {
		s := &out[i]
		root := roots[rng.IntN(len(roots))]
		root = root[rng.IntN(len(root)):] // any suffix of a root
		for range rng.IntN(12) {
			a := 0x400000 + rng.Uint64N(1<<8)
			s.user = append(s.user, a)
			if rng.IntN(8) == 0 {
				s.user = append(s.user, a, a) // recursion
			}
		}
		s.user = append(s.user, root...)
		if rng.IntN(10) == 0 {
			s.flags = UserTruncated
		}
		if rng.IntN(4) == 0 {
			s.kernel = []uint64{0xffffffff81000000 + rng.Uint64N(64), 0xffffffff81001000}
		}
		s.t = time.Duration(i) * time.Millisecond
		s.pid, s.tid, s.comm, s.weight = 7, 7+uint32(rng.IntN(3)), "app", 1
	}
	return out
}

// TestStackTable writes stacks over many batches, with the writer starting
// a new table now and then, and reads every one back as written.
func TestStackTable(t *testing.T) {
	for _, maxWords := range []int{writerTableFrames, 300} {
		rng := rand.New(rand.NewPCG(1, uint64(maxWords)))
		want := randomStacks(rng, 3000)
		clock := newFakeClock()
		var buf bytes.Buffer
		w, err := NewWriter(&buf, clock.options())
		if err != nil {
			t.Fatal(err)
		}
		w.stacks.maxWords = maxWords
		for i, s := range want {
			if err := w.Sample(clock.at(s.t), s.pid, s.tid, s.cpu, s.comm, s.user, s.kernel, s.flags, s.weight); err != nil {
				t.Fatal(err)
			}
			if i%97 == 0 {
				w.Flush()
			}
		}
		w.Close()
		_, got, _, _, err := readAll(t, buf.Bytes())
		if err != io.EOF {
			t.Fatal(err)
		}
		sortSamples(got)
		if len(got) != len(want) {
			t.Fatalf("%d samples; want %d", len(got), len(want))
		}
		for i := range want {
			if got[i].String() != want[i].String() {
				t.Fatalf("max %d words: sample %d:\n%v\nwant\n%v", maxWords, i, got[i], want[i])
			}
		}
		s, err := Summarize(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		frames := 0
		for _, s := range want {
			frames += len(s.user) + len(s.kernel)
		}
		t.Logf("max %d words: %d samples, %d frames, %d stack entries, %d bytes (%.2f bytes/frame)",
			maxWords, len(want), frames, s.Stacks, buf.Len(), float64(buf.Len())/float64(frames))
	}
}

// TestStackSharing checks what the table stores: a stack seen before costs
// nothing, and a stack ending in frames the table holds stores only its
// own, whether they end a whole stack or part of one.
func TestStackSharing(t *testing.T) {
	d := newStackDict()
	abcd := []uint64{0xa, 0xb, 0xc, 0xd}
	if id := d.stack(abcd, false); id != 0 || len(d.words) != 4 {
		t.Fatalf("first stack: id %d, %d words", id, len(d.words))
	}
	if id := d.stack(slices.Clone(abcd), false); id != 0 || len(d.entries) != 1 {
		t.Errorf("the same stack again: id %d, %d entries", id, len(d.entries))
	}
	if id := d.stack(abcd, true); id != 1 || len(d.words) != 8 {
		t.Errorf("the same frames truncated: id %d, %d words; want a stack of its own", id, len(d.words))
	}
	xcd := []uint64{0xe, 0xc, 0xd} // ends in part of abcd
	if id := d.stack(xcd, false); id != 2 || len(d.words) != 9 || d.entries[2] != (stackEntry{parent: 0, skip: 2, off: 8, n: 1, depth: 3}) {
		t.Errorf("a stack sharing a suffix: id %d, %d words, entry %+v", id, len(d.words), d.entries[id])
	}
	if id := d.stack(abcd[1:], false); id != 3 || len(d.words) != 9 || d.entries[3].n != 0 {
		t.Errorf("a suffix of a stored stack: id %d, %d words, entry %+v", id, len(d.words), d.entries[id])
	}
	// A stack ending in that suffix has the stack holding it for parent,
	// not the entry of no frames.
	fbcd := []uint64{0xf, 0xb, 0xc, 0xd}
	if id := d.stack(fbcd, false); id != 4 || d.entries[4] != (stackEntry{parent: 0, skip: 1, off: 9, n: 1, depth: 4}) {
		t.Errorf("a stack ending in a suffix: id %d, entry %+v", id, d.entries[id])
	}
	if id := d.stack(abcd[1:], false); id != 3 {
		t.Errorf("the suffix again: id %d", id)
	}
	var table StackTable
	p, _ := d.appendPayload(nil)
	if _, err := parseStacks(payload{b: p, version: Version}, &table); err != nil {
		t.Fatal(err)
	}
	for i, want := range [][]uint64{abcd, abcd, xcd, abcd[1:], fbcd} {
		var got []uint64
		for _, f := range table.Stack(nil, i) {
			got = append(got, f.Addr)
		}
		if truncated := i == 1; truncated {
			want = append(slices.Clone(want), 0)
		}
		if !slices.Equal(got, want) {
			t.Errorf("stack %d: %x; want %x", i, got, want)
		}
	}
}

func TestStacksChunkErrors(t *testing.T) {
	for _, c := range []struct {
		name    string
		version int
		payload string
	}{
		{"first beyond the table", 3, "\x05\x01\x00\x10\x02"},
		{"parent not yet defined", 3, "\x01\x01\x01\x10\x02"},
		{"skip without a parent", 3, "\x00\x01\x00\x12\x02"},
		{"skip beyond the parent's own frames", 3, "\x00\x02\x00\x20\x02\x02\x01\x12\x02"},
		{"skip far beyond", 3, "\x00\x02\x00\x10\x02\x01\x1f\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01\x02"},
		{"the parent of a parentless stack is empty", 3, "\x00\x02\x00\x00\x01\x10\x02"},
		{"frames cut short", 3, "\x00\x01\x00\x20\x02"},
		{"more frames than bytes", 3, "\x00\x01\x00\x80\x80\x80\x01\x02"},
		{"bad frame varint", 3, "\x00\x01\x00\x10\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f"},
		{"reference before the table", 3, "\x00\x01\x00\x10\x05"},
		{"reference to a frame not read yet", 3, "\x00\x01\x00\x20\x03\x02"},
		{"far difference cut short", 3, "\x00\x01\x00\x10\x01"},
		{"first beyond the table", 2, "\x05\x01\x00\x00\x02\x10\x01\x00"},
		{"parent not yet defined", 2, "\x00\x01\x01\x00\x02\x10\x01\x00"},
		{"skip without a parent", 2, "\x00\x01\x00\x01\x02\x10\x01\x00"},
		{"skip beyond the parent", 2, "\x00\x02\x00\x00\x02\x10\x01\x00\x01\x02\x02\x00"},
		{"trunc below a parent", 2, "\x00\x02\x00\x00\x02\x10\x01\x00\x01\x00\x02\x10\x01\x01"},
		{"omit frame", 2, "\x00\x01\x00\x00\x02\x10\x01\x40\x00"},
		{"cut record", 2, "\x00\x01\x00\x00\x02\x10\x01"},
	} {
		if _, err := parseStacks(payload{b: []byte(c.payload), version: c.version}, &StackTable{}); err == nil {
			t.Errorf("version %d: %s: accepted", c.version, c.name)
		}
	}
	// Version 2: entries of no frames, each the parent of the next, make a
	// chain that assembling a stack would walk, adding no frame.
	chain := func(n int) []byte {
		b := binary.AppendUvarint([]byte{0}, uint64(n))
		b = append(b, 0, 0, 2, 0x10, 1, 0) // pc 0x1, end
		for i := 1; i < n; i++ {
			b = binary.AppendUvarint(b, uint64(i)) // parent: entry i-1
			b = append(b, 0, 2, 0)                 // skip 0, no frames
		}
		return b
	}
	if _, err := parseStacks(payload{b: chain(maxHops + 1), version: 2}, &StackTable{}); err == nil || !strings.Contains(err.Error(), "chain") {
		t.Errorf("a chain of %d parents: %v", maxHops, err)
	}
	if _, err := parseStacks(payload{b: chain(maxHops), version: 2}, &StackTable{}); err != nil {
		t.Errorf("a chain of %d parents: %v", maxHops-1, err)
	}
	// Version 3: a truncated stack of two frames, 0x1010 and 0x1000 (stored
	// outermost first: +0x1010, then −0x10, zigzag and shifted); one that
	// shares the outer frame and has 0x1016 (+6); one with the outer frame
	// and a reference to 0x1000, 4 words back (the first word); one with the outer frame
	// and 0x1017, a difference too large for a tagged one.
	var table StackTable
	const valid = "\x00\x04\x00\x21\xc0\x80\x01\x3e\x01\x11\x18\x01\x11\x09\x01\x11\x01\x0e"
	if _, err := parseStacks(payload{b: []byte(valid), version: 3}, &table); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"[pc 0x1000 ra 0x1010 truncated]", "[pc 0x1016 ra 0x1010 truncated]",
		"[pc 0x1000 ra 0x1010 truncated]", "[pc 0x1017 ra 0x1010 truncated]"} {
		if got := fmt.Sprint(table.Stack(nil, i)); got != want {
			t.Errorf("stack %d: %s; want %s", i, got, want)
		}
	}
}

// BenchmarkStackDict measures the writer's stack lookup on stacks seen
// before, the common case, and on new stacks.
func BenchmarkStackDict(b *testing.B) {
	stacks := randomStacks(rand.New(rand.NewPCG(3, 4)), 4096)
	frames := 0
	for _, s := range stacks {
		frames += len(s.user)
	}
	d := newStackDict()
	for _, s := range stacks {
		d.stack(s.user, false)
	}
	for i := 0; b.Loop(); i++ {
		d.stack(stacks[i%len(stacks)].user, false)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/stack")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)*float64(len(stacks))/float64(frames), "ns/frame")
}
