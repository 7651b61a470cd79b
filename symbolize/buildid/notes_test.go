package buildid

import (
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/sprof/sprof/internal/testenv"
)

// TestKernelMatchesPerf checks the running kernel's build ID against perf's
// (perf buildid-list -k), which reads the same notes with code of its own.
func TestKernelMatchesPerf(t *testing.T) {
	perf := testenv.RequireTool(t, "perf")
	if _, err := os.Stat(kernelNotes); err != nil {
		testenv.Unavailable(t, "no "+kernelNotes+": "+err.Error())
	}
	out, err := exec.Command(perf, "buildid-list", "-k").Output()
	if err != nil {
		t.Fatalf("perf buildid-list -k: %v", err)
	}
	want := strings.TrimSpace(string(out))
	got, err := Kernel()
	if err != nil || got != want {
		t.Errorf("Kernel() = %s, %v; perf buildid-list -k says %s", got, err, want)
	}
}

func TestNotes(t *testing.T) {
	id := []byte{0xde, 0xad, 0xbe, 0xef, 0x01}
	// As /sys/kernel/notes: Xen and Linux notes around the build ID.
	stream := append(note("Xen\x00", 18, []byte{1, 2, 3, 4, 5, 6, 7, 8}), note("GNU\x00", ntGNUBuildID, id)...)
	stream = append(stream, note("Linux\x00", 0x100, []byte("6.18.0\x00"))...)
	for _, c := range []struct {
		name   string
		stream []byte
		want   string
		err    error
	}{
		{"stream", stream, "deadbeef01", nil},
		{"none", note("Linux\x00", 0x100, []byte("6.18.0\x00")), "", ErrNotFound},
		{"empty", nil, "", ErrNotFound},
		{"cut in the descriptor", stream[:len(note("Xen\x00", 18, make([]byte, 8)))+20], "", nil},
		{"huge descriptor", []byte("\x04\x00\x00\x00\xff\xff\xff\xff\x03\x00\x00\x00GNU\x00"), "", nil},
	} {
		got, err := notes(c.stream, binary.LittleEndian)
		var fe *FormatError
		switch {
		case c.want != "" && (got != c.want || err != nil):
			t.Errorf("%s: %q, %v; want %s", c.name, got, err, c.want)
		case c.err != nil && !errors.Is(err, c.err):
			t.Errorf("%s: %q, %v; want %v", c.name, got, err, c.err)
		case c.want == "" && c.err == nil && !errors.As(err, &fe):
			t.Errorf("%s: %q, %v; want a format error", c.name, got, err)
		}
	}
}
