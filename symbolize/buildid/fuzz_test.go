package buildid

import (
	"bytes"
	"testing"
)

func FuzzRead(f *testing.F) {
	f.Add(elf64(note("GNU\x00", ntGNUBuildID, []byte{1, 2, 3, 4})))
	f.Add(elf64(note("Go\x00\x00", 4, []byte("x"))))
	f.Add([]byte("\x7fELF\x01\x02\x01"))
	f.Add(elf64Sections(note("Go\x00\x00", 4, []byte("x")), note("GNU\x00", ntGNUBuildID, []byte{1, 2, 3, 4})))
	f.Fuzz(func(t *testing.T, b []byte) {
		id, err := Read(bytes.NewReader(b))
		if err == nil && (len(id) == 0 || len(id) > 2*maxIDLen) {
			t.Fatalf("Read returned %q without error", id)
		}
	})
}

func FuzzNotes(f *testing.F) {
	f.Add(note("GNU\x00", ntGNUBuildID, []byte{1, 2, 3, 4}))
	f.Add(append(note("Xen\x00", 18, []byte{1, 2, 3}), note("GNU\x00", ntGNUBuildID, make([]byte, 20))...))
	f.Add([]byte("\x04\x00\x00\x00\xff\xff\xff\xff\x03\x00\x00\x00GNU\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		id, err := Notes(b)
		if err == nil && (len(id) == 0 || len(id) > 2*maxIDLen) {
			t.Fatalf("Notes returned %q without error", id)
		}
	})
}
