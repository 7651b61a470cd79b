package bpf

import (
	"encoding/binary"
	"errors"
	"testing"
	"unsafe"
)

func TestDecode(t *testing.T) {
	var s Sample
	if err := s.decode(makeRecord(2, 3)); err != nil {
		t.Fatal(err)
	}
	if !equal(s.Kernel, []uint64{1, 2}) || !equal(s.User, []uint64{3, 4, 5}) || s.User[0] != s.PC {
		t.Fatalf("kernel %v user %v pc %d", s.Kernel, s.User, s.PC)
	}
	if s.Pid != 42 || s.Tid != 43 || s.CPU != 1 || s.Time != 1e9 || !s.UserTruncated || s.LeafReturn ||
		string(s.Comm[:7]) != "fixture" || s.SP != 0x7ff0 || s.FP != 0x7ff8 {
		t.Fatalf("decoded %+v", s)
	}
	// Appending to Kernel must not overwrite User.
	_ = append(s.Kernel, 99)
	if s.User[0] != 3 {
		t.Fatal("Kernel's capacity reaches into User")
	}
}

func TestDecodeStackCopy(t *testing.T) {
	stack := []byte("the stack from sp up")
	for _, tc := range []struct {
		stack []byte
		trunc bool
	}{
		{nil, false},        // not copied: nil
		{[]byte{}, true},    // copied, nothing readable: empty
		{stack, true},       // copied
		{stack[:3:3], true}, // not a multiple of 8
	} {
		var s Sample
		if err := s.decode(makeCopyRecord(2, 3, tc.stack)); err != nil {
			t.Fatal(err)
		}
		if string(s.StackCopy) != string(tc.stack) || (s.StackCopy == nil) != (tc.stack == nil) ||
			s.StackCopyTruncated != tc.trunc || s.StackCopyFault || !equal(s.User, []uint64{3, 4, 5}) {
			t.Fatalf("copy %q: decoded %q (nil %v) truncated %v fault %v user %v",
				tc.stack, s.StackCopy, s.StackCopy == nil, s.StackCopyTruncated, s.StackCopyFault, s.User)
		}
		// A reused Sample forgets the previous copy.
		if err := s.decode(makeRecord(1, 1)); err != nil || s.StackCopy != nil || s.StackCopyTruncated {
			t.Fatalf("after a record without a copy: %q, %v (%v)", s.StackCopy, s.StackCopyTruncated, err)
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	bad := makeRecord(1, 1)
	bad[0] = 9 // version
	noFlag := makeCopyRecord(1, 1, make([]byte, 8))
	noFlag[2] &^= flagStackCopy // flags, low byte
	huge := makeCopyRecord(0, 1, make([]byte, 8))
	binary.NativeEndian.PutUint32(huge[unsafe.Offsetof(sprofSampleHeader{}.StackBytes):], MaxStackCopy+1)
	for _, tc := range []struct {
		name, field string
		raw         []byte
	}{
		{"short header", "header", makeRecord(0, 0)[:headerSize-1]},
		{"unknown version", "version", bad},
		{"short frames", "frames", makeRecord(4, 4)[:headerSize+8*7]},
		{"too many frames", "frame counts", makeRecord(maxFrames, 1)},
		{"short stack copy", "stack copy", makeCopyRecord(1, 1, make([]byte, 64))[:headerSize+16+63]},
		{"copy bytes without the flag", "stack bytes", noFlag},
		{"copy longer than the limit", "stack bytes", huge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s Sample
			err := s.decode(tc.raw)
			var re *RecordError
			if !errors.As(err, &re) || re.Field != tc.field {
				t.Fatalf("decode: %v, want a RecordError about %s", err, tc.field)
			}
		})
	}
}

func TestRingBufferSize(t *testing.T) {
	for _, tc := range []struct {
		hz, cpus, copy, want int
	}{
		// Without copies, 250 ms of records:
		{99, 2, 0, minRingSize},               // 50 KiB → the floor
		{499, 16, 0, 2 << 20},                 // 1.95 MiB → next power of two
		{99, 64, 0, 2 << 20},                  // 1.55 MiB
		{100000, 4096, 0, maxDefaultRingSize}, // capped
		// With copies, 64 ms of records:
		{99, 2, 16384, minRingSize},       // 216 KiB → the floor
		{499, 2, 16384, 2 << 20},          // 1.06 MiB → 2 MiB
		{499, 2, 8192, 1 << 20},           // 575 KiB → 1 MiB
		{999, 16, 8192, maxCopyRingSize},  // 9 MiB: capped
		{999, 64, 16384, maxCopyRingSize}, // 68 MiB: capped
		{1, 1, MaxStackCopy, minRingSize}, // 4 KiB → the floor
	} {
		got, err := ringBufferSize(Config{Frequency: tc.hz, StackCopy: tc.copy}, tc.cpus)
		if err != nil || got != tc.want {
			t.Errorf("ringBufferSize(%d Hz, %d CPUs, %d-byte copies) = %d, %v; want %d", tc.hz, tc.cpus, tc.copy, got, err, tc.want)
		}
	}
}

func TestBacklogSize(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		cpus int
		want int
	}{
		{Config{Frequency: 99}, 2, minBacklog},                       // 0.8 MiB in 4 s → the floor
		{Config{Frequency: 499, StackCopy: 16384}, 2, 69_492_736},    // 4 s of 17.4 MB/s
		{Config{Frequency: 999, StackCopy: 16384}, 64, maxBacklog},   // capped
		{Config{Frequency: 99, Backlog: 12345}, 2, 12345},            // as asked
		{Config{Frequency: 99, StackCopy: 16384, Backlog: -1}, 2, 0}, // none
	} {
		if got := backlogSize(tc.cfg, tc.cpus); got != tc.want {
			t.Errorf("backlogSize(%+v, %d CPUs) = %d, want %d", tc.cfg, tc.cpus, got, tc.want)
		}
	}
}

// A record that is not 8-byte aligned in memory decodes the same, by copy.
func TestDecodeMisaligned(t *testing.T) {
	raw := makeRecord(2, 3)
	shifted := append(make([]byte, 1, len(raw)+1), raw...)[1:]
	var s Sample
	if err := s.decode(shifted); err != nil {
		t.Fatal(err)
	}
	if !equal(s.Kernel, []uint64{1, 2}) || !equal(s.User, []uint64{3, 4, 5}) {
		t.Fatalf("kernel %v user %v", s.Kernel, s.User)
	}
}

// makePythonRecord is makeCopyRecord with a Python part of the given
// count word and words.
func makePythonRecord(kernel, user int, count uint64, words []uint64, stack []byte) []byte {
	raw := makeCopyRecord(kernel, user, stack)
	binary.NativeEndian.PutUint16(raw[2:], binary.NativeEndian.Uint16(raw[2:])|flagPython)
	at := headerSize + 8*(kernel+user)
	part := binary.NativeEndian.AppendUint64(nil, count)
	for _, w := range words {
		part = binary.NativeEndian.AppendUint64(part, w)
	}
	return append(raw[:at:at], append(part, raw[at:]...)...)
}

func TestDecodePython(t *testing.T) {
	var s Sample
	words := []uint64{0x1001, 0x1010, 0x2000, 0x2020}
	stack := []byte("stack bytes")
	if err := s.decode(makePythonRecord(1, 2, 2|pythonTruncated, words, stack)); err != nil {
		t.Fatal(err)
	}
	if !equal(s.Python, words) || !s.PythonTruncated || s.PythonFresh || !equal(s.User, []uint64{2, 3}) || string(s.StackCopy) != string(stack) {
		t.Fatalf("python %x truncated %v fresh %v user %v copy %q", s.Python, s.PythonTruncated, s.PythonFresh, s.User, s.StackCopy)
	}
	// Appending to User must not overwrite the Python part.
	_ = append(s.User, 99)
	if s.Python[0] != 0x1001 {
		t.Fatal("User's capacity reaches into Python")
	}
	if err := s.decode(makePythonRecord(1, 2, 2|pythonFresh, words, nil)); err != nil || !s.PythonFresh || s.PythonTruncated {
		t.Fatalf("a fresh Python part: fresh %v truncated %v (%v)", s.PythonFresh, s.PythonTruncated, err)
	}
	// PY_FRESH with no frame has no code object to tell of.
	if err := s.decode(makePythonRecord(1, 2, pythonFresh, nil, nil)); err != nil || s.PythonFresh {
		t.Fatalf("a fresh Python part without frames: fresh %v (%v)", s.PythonFresh, err)
	}
	if err := s.decode(makePythonRecord(1, 2, 2|pythonFresh, words, nil)); err != nil {
		t.Fatal(err)
	}
	if err := s.decode(makeRecord(1, 1)); err != nil || s.Python != nil || s.PythonTruncated || s.PythonFresh {
		t.Fatalf("after a record without Python: %x %v %v (%v)", s.Python, s.PythonTruncated, s.PythonFresh, err)
	}
	for _, raw := range [][]byte{
		makePythonRecord(1, 1, 3, words, nil),                  // 3 frames, 2 there
		makePythonRecord(1, 1, maxPythonFrames+1, words, nil),  // beyond PY_MAX_FRAMES
		makePythonRecord(1, 1, 0, nil, nil)[:headerSize+8*2+4], // count word cut
		makePythonRecord(maxFrames-1, 1, 0, nil, nil),          // no room for the count
	} {
		var e *RecordError
		if err := s.decode(raw); !errors.As(err, &e) {
			t.Errorf("decode of a bad Python part: %v, want a RecordError", err)
		}
	}
}

// commOf clears what follows a comm's NUL, which the programs copy as the
// task holds it, and keeps a 16-byte name without one.
func TestCommOf(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{"short\x00r-name15", "short"},
		{"sixteen-bytes-ok", "sixteen-bytes-ok"},
		{"", ""},
		{"\x00garbage", ""},
	} {
		var raw [16]int8
		for i, c := range []byte(tc.raw) {
			raw[i] = int8(c)
		}
		var want [16]byte
		copy(want[:], tc.want)
		if got := commOf(raw); got != want {
			t.Errorf("commOf(%q) = %q, want %q", tc.raw, got, want)
		}
	}
}
