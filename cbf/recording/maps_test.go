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
	// Each flush that defines entries starts with a Tables chunk: 9
	// bytes of frame and 5 of counts, here.
	const tables = 14
	defined := first - len(Magic) - 37 - tables // the header chunk
	same, moved = same-tables, moved-tables
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
	// One record (time 0, pid 1, flags 0, comm ""), then its map: version
	// 3 stores the pid as a difference and a base in pages or, after 01,
	// in bytes; version 2 the pid itself and a base in bytes.
	for _, c := range []struct {
		name    string
		version int
		payload string
	}{
		{"map not defined", 3, "\x01\x00\x02\x00\x00\x05"},
		{"image not defined", 3, "\x01\x00\x02\x00\x00\x01\x01\x03\x00"},
		{"no text", 3, "\x01\x00\x02\x00\x00\x01\x01\x00\x01a\x00\x00\x00\x02"},
		{"overlapping images", 3, "\x01\x00\x02\x00\x00\x01\x02\x00\x01a\x00\x00\x80\x40\x02\x01\x02"},
		{"past the end", 3, "\x01\x00\x02\x00\x00\x01\x01\x00\x01a\x00\x00\x80\x40\xfe\xff\xff\xff\xff\xff\xff\x7f"},
		{"base in pages out of range", 3, "\x01\x00\x02\x00\x00\x01\x01\x00\x01a\x00\x00\x20\xfe\xff\xff\xff\xff\xff\xff\xff\xff\x01"},
		{"base neither pages nor bytes", 3, "\x01\x00\x02\x00\x00\x01\x01\x00\x01a\x00\x00\x20\x03"},
		{"map not defined", 2, "\x01\x00\x01\x00\x00\x05"},
		{"image not defined", 2, "\x01\x00\x01\x00\x00\x01\x01\x03\x00"},
		{"no text", 2, "\x01\x00\x01\x00\x00\x01\x01\x00\x01a\x00\x00\x00\x10"},
		{"overlapping images", 2, "\x01\x00\x01\x00\x00\x01\x02\x00\x01a\x00\x00\x20\x10\x01\x08"},
		{"past the end", 2, "\x01\x00\x01\x00\x00\x01\x01\x00\x01a\x00\x00\x20\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"},
	} {
		if _, err := parseProcesses(payload{b: []byte(c.payload), version: c.version}, &mapTable{}); err == nil {
			t.Errorf("version %d: %s: accepted", c.version, c.name)
		}
	}
	for _, c := range []struct {
		version int
		payload string
		base    uint64
	}{
		{3, "\x01\x00\x02\x00\x00\x01\x01\x00\x01a\x00\x00\x20\x01\x10", 0x10},    // in bytes
		{3, "\x01\x00\x02\x00\x00\x01\x01\x00\x01a\x00\x00\x20\x82\x01", 0x41000}, // 0x41 pages
		{2, "\x01\x00\x01\x00\x00\x01\x01\x00\x01a\x00\x00\x20\x10", 0x10},
	} {
		var good mapTable
		procs, err := parseProcesses(payload{b: []byte(c.payload), version: c.version}, &good)
		if err != nil || len(good.maps) != 1 || procs[0].PID != 1 || good.maps[0].Images()[0].Base != c.base {
			t.Errorf("version %d: a map of one image at %#x: %v, %v", c.version, c.base, procs, err)
		}
	}
}
