package debugfile

import (
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sprof/sprof/internal/testenv"
	"github.com/sprof/sprof/symbolize/buildid"
)

const fixtures = "../../testdata/symbolize"

func TestParseLink(t *testing.T) {
	le := binary.LittleEndian
	tests := []struct {
		name    string
		b       []byte
		want    Link
		wantErr string
	}{
		{"padded", []byte("ab.debug\x00\x00\x00\x00\x78\x56\x34\x12"), Link{"ab.debug", 0x12345678}, ""},
		{"name fills a word", []byte("abc\x00\x01\x00\x00\x00"), Link{"abc", 1}, ""},
		{"no NUL", []byte("abcdefgh"), Link{}, "not NUL-terminated"},
		{"empty name", []byte("\x00\x00\x00\x00\x01\x00\x00\x00"), Link{}, "empty"},
		{"CRC missing", []byte("abcdef\x00\x00\x01\x02"), Link{}, "runs past"},
		{"path", []byte("../x\x00\x00\x00\x00\x01\x00\x00\x00"), Link{}, "not a plain file name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseLink(tt.b, le)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseLink = %+v, %v; want error %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseLink = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

// linkOf reads the .gnu_debuglink of an ELF fixture (written by objcopy).
func linkOf(t *testing.T, path string) Link {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := f.Section(".gnu_debuglink").Data()
	if err != nil {
		t.Fatal(err)
	}
	l, err := ParseLink(b, f.ByteOrder)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestFindByBuildID(t *testing.T) {
	id, err := buildid.File(filepath.Join(fixtures, "c-stripped"))
	if err != nil {
		t.Fatal(err)
	}
	dirs := []string{t.TempDir(), filepath.Join(fixtures, "debug")}
	want := filepath.Join(fixtures, "debug", ".build-id", id[:2], id[2:]+".debug")
	if got := Find(Request{BuildID: id, DebugDirs: dirs}); got != want {
		t.Errorf("Find = %q, want %q", got, want)
	}
	// A file under the right name with another build ID is not trusted.
	stale := t.TempDir()
	other := "00" + id[2:]
	copyFile(t, want, filepath.Join(stale, ".build-id", other[:2], other[2:]+".debug"))
	if got := Find(Request{BuildID: other, DebugDirs: []string{stale}}); got != "" {
		t.Errorf("stale file: Find = %q, want none", got)
	}
	for _, bad := range []string{"../../etc", "ab", "ABCDEF", ""} {
		if got := Find(Request{BuildID: bad, DebugDirs: dirs}); got != "" {
			t.Errorf("build ID %q: Find = %q", bad, got)
		}
	}
}

func TestFindByDebuglink(t *testing.T) {
	link := linkOf(t, filepath.Join(fixtures, "c-debuglink"))
	src := filepath.Join(fixtures, ".debug", link.Name)
	bin, global := t.TempDir(), t.TempDir()
	tests := []struct {
		name  string
		place string // where the debug file is put
		want  bool
	}{
		{"next to the binary", filepath.Join(bin, link.Name), true},
		{"in .debug", filepath.Join(bin, ".debug", link.Name), true},
		{"under the global dir", filepath.Join(global, bin, link.Name), true},
		{"elsewhere", filepath.Join(t.TempDir(), link.Name), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			copyFile(t, src, tt.place)
			defer os.Remove(tt.place)
			got := Find(Request{Link: link, BinaryDirs: []string{bin}, DebugDirs: []string{global}})
			if (got == tt.place) != tt.want {
				t.Errorf("Find = %q, want %q: %v", got, tt.place, tt.want)
			}
		})
	}
	// A debug file whose contents changed fails the CRC.
	p := filepath.Join(bin, link.Name)
	copyFile(t, src, p)
	b, _ := os.ReadFile(p)
	b[len(b)/2] ^= 1
	os.WriteFile(p, b, 0o644)
	if got := Find(Request{Link: link, BinaryDirs: []string{bin}}); got != "" {
		t.Errorf("corrupt debug file: Find = %q", got)
	}
	// A FIFO under the name neither blocks nor matches.
	os.Remove(p)
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		testenv.Unavailable(t, "mkfifo: "+err.Error())
	}
	if got := Find(Request{Link: link, BinaryDirs: []string{bin}}); got != "" {
		t.Errorf("FIFO: Find = %q", got)
	}
}
