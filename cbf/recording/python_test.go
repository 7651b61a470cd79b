package recording

import (
	"bytes"
	"reflect"
	"testing"
	"time"
)

func TestPythonRoundTrip(t *testing.T) {
	want := []PythonFrame{
		{PID: 100, Addr: 1<<63 | 0x7f0000001010, Function: "leaf", File: "/app/chain.py", Line: 27},
		{PID: 100, Addr: 1<<63 | 0x7f0000001200, Function: "Outer.middle", File: "/app/chain.py", Line: 41},
		{PID: 101, Addr: 1<<63 | 0x7f0000001010, Function: "<module>", File: "/app/ünïcode.py", Line: 1},
	}
	clock := newFakeClock()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, clock.options())
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range want {
		clock.advance(time.Millisecond)
		want[i].Time = clock.now().Sub(clock.at(0))
		if err := w.Python(clock.now(), f.PID, f); err != nil {
			t.Fatal(err)
		}
		if err := w.Sample(clock.now(), f.PID, f.PID, 0, "python3", []uint64{f.Addr, 0x401000}, nil, 0, 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	var got []PythonFrame
	for _, c := range allChunks(t, buf.Bytes()) {
		if c.Type == ChunkPython {
			fs, err := c.Python()
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, fs...)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("read back\n%+v\nwant\n%+v", got, want)
	}
}
