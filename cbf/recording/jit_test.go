package recording

import (
	"bytes"
	"reflect"
	"testing"
	"time"
)

var testJIT = []JITSymbol{
	{PID: 100, Start: 0x7f0000001000, Size: 0x80, Name: "JS:*hotLoop /tmp/hot.js:3:17",
		Lines: []JITLine{{0, "/tmp/hot.js", 3}, {0x10, "/tmp/hot.js", 4}, {0x20, "/tmp/other.js", 9}}},
	{PID: 101, Start: 0x7f0000002000, Size: 0x40, Name: "void Hot.spin()"},
	{PID: 100, Start: 0x7f0000001000, Size: 0x20, Name: "JS:*reused"},
}

// writeJITRecording writes a recording whose samples of pids 100 and 101
// run generated code, with the JIT symbols they use.
func writeJITRecording(t testing.TB) []byte {
	t.Helper()
	clock := newFakeClock()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, clock.options())
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range testJIT {
		clock.advance(time.Millisecond)
		if err := w.JIT(clock.now(), s.PID, s); err != nil {
			t.Fatal(err)
		}
		if err := w.Sample(clock.now(), s.PID, s.PID, 0, "app", []uint64{s.Start + uint64(i)}, nil, 0, 1); err != nil {
			t.Fatal(err)
		}
	}
	// A symbol of no code is not written: a reader would reject it.
	if err := w.JIT(clock.now(), 100, JITSymbol{Start: 0x1000, Name: "empty"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestJITRoundTrip(t *testing.T) {
	data := writeJITRecording(t)
	var got []JITSymbol
	var types []ChunkType
	for _, c := range allChunks(t, data) {
		types = append(types, c.Type)
		if c.Type == ChunkJIT {
			syms, err := c.JIT()
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, syms...)
		}
	}
	want := make([]JITSymbol, len(testJIT))
	for i, s := range testJIT {
		want[i] = s
		want[i].Time = time.Duration(i+1) * time.Millisecond
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("read back\n%+v\nwant\n%+v", got, want)
	}
	// The symbols come before the samples that use them.
	if want := []ChunkType{ChunkTables, ChunkJIT, ChunkStacks, ChunkSamples, ChunkEnd}; !reflect.DeepEqual(types, want) {
		t.Fatalf("chunks %v, want %v", types, want)
	}
}

func TestJITMalformed(t *testing.T) {
	for _, c := range []struct {
		name, payload, field string
	}{
		{"count", "\x05\x00", "count"},
		{"size 0", "\x01\x00\x00\x80\x20\x00\x01a\x00", "size"},
		{"line past the code", "\x01\x00\x00\x80\x20\x10\x01a\x01\x10\x01\x00", "line offset"},
		{"name not UTF-8", "\x01\x00\x00\x80\x20\x10\x01\xff\x00", "name"},
	} {
		_, err := parseJIT(payload{b: []byte(c.payload), base: 100, version: Version})
		if err == nil || !bytes.Contains([]byte(err.Error()), []byte(c.field)) {
			t.Errorf("%s: err %v, want one naming %s", c.name, err, c.field)
		}
	}
}
