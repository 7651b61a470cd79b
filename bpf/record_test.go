package bpf

import (
	"errors"
	"strings"
	"testing"
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

func TestDecodeRejects(t *testing.T) {
	bad := makeRecord(1, 1)
	bad[0] = 9 // version
	for _, tc := range []struct {
		name, field string
		raw         []byte
	}{
		{"short header", "header", makeRecord(0, 0)[:headerSize-1]},
		{"unknown version", "version", bad},
		{"short frames", "frames", makeRecord(4, 4)[:headerSize+8*7]},
		{"too many frames", "frame counts", makeRecord(maxFrames, 1)},
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

func TestParseCPUList(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
		err  string
	}{
		{in: "0", want: []int{0}},
		{in: "0-3,6,8-9", want: []int{0, 1, 2, 3, 6, 8, 9}},
		{in: "", err: "empty"},
		{in: "3-1", err: "bad CPU range"},
		{in: "1,1", err: "not increasing"},
		{in: "x", err: "bad CPU number"},
	} {
		got, err := parseCPUList(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseCPUList(%q) error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || len(got) != len(tc.want) {
			t.Errorf("parseCPUList(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("parseCPUList(%q) = %v, want %v", tc.in, got, tc.want)
			}
		}
	}
}

func TestRingBufferSize(t *testing.T) {
	for _, tc := range []struct {
		hz, cpus, want int
	}{
		{99, 2, minRingSize},        // 198 KiB of typical records → the floor
		{99, 64, 8 << 20},           // 6.2 MiB → next power of two
		{100000, 4096, maxRingSize}, // capped
	} {
		got, err := ringBufferSize(Config{Frequency: tc.hz}, tc.cpus)
		if err != nil || got != tc.want {
			t.Errorf("ringBufferSize(%d Hz, %d CPUs) = %d, %v; want %d", tc.hz, tc.cpus, got, err, tc.want)
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
