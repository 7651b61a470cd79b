package bpf

import (
	"errors"
	"testing"
)

// FuzzDecode feeds arbitrary bytes to the record decoder: it must return a
// *RecordError or a Sample whose stacks lie within the record, never panic.
func FuzzDecode(f *testing.F) {
	f.Add(makeRecord(0, 0))
	f.Add(makeRecord(3, 5))
	f.Add(makeRecord(128, 1024))
	f.Add(makeCopyRecord(2, 3, []byte("stack")))
	f.Add(makeCopyRecord(0, 1, make([]byte, 4096)))
	f.Add(makeRecord(2, 2)[:headerSize+8])
	f.Add([]byte{1, 0})
	f.Add(makeOffCPURecord(3, 5, 1e6))
	f.Add(makeOffCPURecord(1, 1, 1)[:offCPUHeaderSize+4])
	f.Fuzz(func(t *testing.T, raw []byte) {
		var s Sample
		err := s.decode(raw)
		if err != nil {
			var re *RecordError
			if !errors.As(err, &re) || re.Off < 0 || re.Off > len(raw) {
				t.Fatalf("error %v is not a RecordError within the record", err)
			}
			return
		}
		if headerSize+8*(len(s.User)+len(s.Kernel))+len(s.StackCopy) > len(raw) || len(s.StackCopy) > MaxStackCopy {
			t.Fatalf("%d + %d frames and a %d-byte stack copy decoded from %d bytes",
				len(s.Kernel), len(s.User), len(s.StackCopy), len(raw))
		}
	})
}
