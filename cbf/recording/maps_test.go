package recording

import (
	"bytes"
	"testing"
)

// TestMapTable checks that maps and images are stored once: a process
// whose map equals an earlier one refers to it, and one with the same
// images at other addresses stores only their bases.
func TestMapTable(t *testing.T) {
	clock := newFakeClock()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, clock.options())
	if err != nil {
		t.Fatal(err)
	}
	w.Process(clock.now(), 1, "app", testMap(t, 0x400000))
	w.Flush()
	first := buf.Len()
	w.Process(clock.now(), 2, "app", testMap(t, 0x400000)) // the same map
	w.Flush()
	same := buf.Len() - first
	w.Process(clock.now(), 3, "app", testMap(t, 0x500000)) // the same images elsewhere
	w.Flush()
	moved := buf.Len() - first - same
	defined := first - len(Magic) - 37 // the header chunk
	if same > 20 || moved > 40 || moved*3 > defined {
		t.Errorf("a map took %d bytes; repeated %d, the same images elsewhere %d; want them stored once", defined, same, moved)
	}
	w.Close()
	_, _, procs, _, _ := readAll(t, buf.Bytes())
	if len(procs) != 3 || procs[0].Map != procs[1].Map || !procs[1].Map.Equal(testMap(t, 0x400000)) || !procs[2].Map.Equal(testMap(t, 0x500000)) {
		t.Errorf("process records %v", procs)
	}
}

func TestMapErrors(t *testing.T) {
	for _, c := range []struct{ name, payload string }{
		{"map not defined", "\x01\x00\x01\x00\x00\x05"},
		{"image not defined", "\x01\x00\x01\x00\x00\x01\x01\x03\x00"},
		{"no text", "\x01\x00\x01\x00\x00\x01\x01\x00\x01a\x00\x00\x00\x10"},
		{"overlapping images", "\x01\x00\x01\x00\x00\x01\x02\x00\x01a\x00\x00\x20\x10\x01\x08"},
		{"past the end", "\x01\x00\x01\x00\x00\x01\x01\x00\x01a\x00\x00\x20\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"},
	} {
		if _, err := parseProcesses(payload{b: []byte(c.payload)}, &mapTable{}); err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
	var good mapTable
	if _, err := parseProcesses(payload{b: []byte("\x01\x00\x01\x00\x00\x01\x01\x00\x01a\x00\x00\x20\x10")}, &good); err != nil || len(good.maps) != 1 {
		t.Errorf("a map of one image: %v", err)
	}
}
