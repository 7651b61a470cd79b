package debugfile

import (
	"encoding/binary"
	"testing"
)

func FuzzParseLink(f *testing.F) {
	f.Add([]byte("ab.debug\x00\x00\x00\x00\x78\x56\x34\x12"))
	f.Add([]byte("abc\x00\x01\x00\x00\x00"))
	f.Add([]byte("x\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := ParseLink(b, binary.BigEndian)
		if err == nil && !safeName(l.Name) {
			t.Fatalf("ParseLink accepted %q", l.Name)
		}
	})
}
