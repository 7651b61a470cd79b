package buildid

import (
	"bytes"
	"testing"
)

func FuzzRead(f *testing.F) {
	f.Add(elf64(note("GNU\x00", ntGNUBuildID, []byte{1, 2, 3, 4})))
	f.Add(elf64(note("Go\x00\x00", 4, []byte("x"))))
	f.Add([]byte("\x7fELF\x01\x02\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		id, err := Read(bytes.NewReader(b))
		if err == nil && (len(id) == 0 || len(id) > 2*maxIDLen) {
			t.Fatalf("Read returned %q without error", id)
		}
	})
}
