package perfring

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// FuzzParse feeds arbitrary records to Parse, which must never panic and
// must return slices inside the record.
func FuzzParse(f *testing.F) {
	f.Add(mmap2(1, 0x1000, 0x1000, 0, bytes.Repeat([]byte{2}, 20), "/bin/true", 5), true)
	f.Add(mmap2(1, 0x1000, 0x1000, 0, nil, "/bin/true", 5), false)
	f.Add(make([]byte, 8), true)
	f.Fuzz(func(t *testing.T, rec []byte, buildIDs bool) {
		if len(rec) >= headerSize && len(rec) < 1<<16 {
			// Most inputs should get past the size check.
			binary.NativeEndian.PutUint16(rec[6:], uint16(len(rec)))
		}
		var r Record
		if err := Parse(rec, &r, buildIDs); err != nil {
			return
		}
		if len(r.Filename)+len(r.BuildID)+len(r.Comm) > len(rec) {
			t.Fatalf("slices longer than the record")
		}
	})
}

// FuzzRing writes arbitrary bytes into a ring's data area with an arbitrary
// head and checks that Read terminates without panicking.
func FuzzRing(f *testing.F) {
	f.Add(mmap2(1, 0x1000, 0x1000, 0, nil, "/bin/true", 5), uint64(120), uint64(0))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 8, 0}, uint64(1<<40), uint64(16))
	f.Fuzz(func(t *testing.T, data []byte, head, tail uint64) {
		fr := newFakeRing(t, 256)
		copy(fr.data, data)
		fr.meta.Data_head, fr.meta.Data_tail = head, tail
		n := 0
		fr.Read(func(rec []byte) {
			n++
			if len(rec) < headerSize || len(rec) > 256 {
				t.Fatalf("record of %d bytes from a 256-byte ring", len(rec))
			}
		})
		if n > 256/headerSize {
			t.Fatalf("%d records from a 256-byte ring", n)
		}
		if fr.meta.Data_tail != head {
			t.Fatalf("tail %d after Read, head %d", fr.meta.Data_tail, head)
		}
	})
}
