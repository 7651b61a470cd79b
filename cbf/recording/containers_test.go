package recording

import (
	"bytes"
	"strings"
	"testing"
)

// processesPayload returns the payload of the first processes chunk of a
// recording.
func processesPayload(t *testing.T, data []byte) []byte {
	t.Helper()
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	for {
		c, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		if c.Type == ChunkProcesses {
			return c.Payload
		}
	}
}

func TestContainers(t *testing.T) {
	const id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	long := strings.Repeat("c", 300)
	write := func(containers ...string) []byte {
		clock := newFakeClock()
		var buf bytes.Buffer
		w, err := NewWriter(&buf, clock.options())
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range containers {
			if err := w.ProcessInContainer(clock.now(), uint32(100+i), "app", c, testMap(t, 0x400000)); err != nil {
				t.Fatal(err)
			}
		}
		w.Flush()
		// A later chunk refers to the name defined in the first.
		w.ProcessInContainer(clock.now(), 200, "app", id, testMap(t, 0x400000))
		w.Exit(clock.now(), 200)
		w.Close()
		return buf.Bytes()
	}
	data := write(id, "", id, long, "")
	_, _, procs, _, err := readAll(t, data)
	if err == nil || len(procs) != 7 {
		t.Fatalf("%d records, %v", len(procs), err)
	}
	for i, want := range []string{id, "", id, long[:MaxContainer], "", id, ""} {
		if procs[i].Container != want {
			t.Errorf("record %d: container %q; want %q", i, procs[i].Container, want)
		}
	}
	// The records come first, as without containers, so that a reader
	// that knows nothing of containers reads the same records.
	plain := processesPayload(t, write("", "", "", "", ""))
	with := processesPayload(t, data)
	if !bytes.HasPrefix(with, plain) {
		t.Errorf("records with containers\n% x\ndo not start with the records without\n% x", with, plain)
	}
	// Each name is stored once: the repeat is a one-byte reference. The
	// count, the first id defined, none, the repeat, the cut name defined.
	if extra, want := len(with)-len(plain), 1+(1+1+len(id))+1+1+(1+2+MaxContainer); extra != want {
		t.Errorf("containers took %d bytes; want %d", extra, want)
	}
}

func TestContainerErrors(t *testing.T) {
	// One record of pid 1 without a map, then the containers.
	const record = "\x01\x00\x02\x00\x00\x00"
	for _, c := range []struct{ name, containers string }{
		{"more containers than records", "\x02\x00\x00"},
		{"undefined container", "\x01\x02"},
		{"cut short", "\x01\x01\x05ab"},
		{"too long", "\x01\x01\x81\x02" + strings.Repeat("c", 257)},
		{"not UTF-8", "\x01\x01\x01\xff"},
	} {
		if _, err := parseProcesses(payload{b: []byte(record + c.containers), version: Version}, &mapTable{}); err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
	var tab mapTable
	procs, err := parseProcesses(payload{b: []byte(record + "\x01\x01\x03abc" + "from a later version"), version: Version}, &tab)
	if err != nil || procs[0].Container != "abc" || len(tab.containers) != 1 {
		t.Errorf("a container and a later field: %+v, %v", procs, err)
	}
}
