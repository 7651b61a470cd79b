package convert

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/sprof/sprof/internal/testenv"
	"github.com/sprof/sprof/symbolize/gsym"
)

// TestCompressedSections converts the g++ fixture with its debug sections
// compressed by objcopy in each way ELF allows (SHF_COMPRESSED with zlib or
// zstd, and GNU's older .zdebug sections) and expects the bytes of the
// uncompressed fixture's conversion.
func TestCompressedSections(t *testing.T) {
	objcopy := testenv.RequireTool(t, "objcopy")
	orig := filepath.Join(fixtures, "cxxgcc")
	want := encodeELF(t, orig)
	for _, how := range []string{"zlib", "zstd", "zlib-gnu"} {
		t.Run(how, func(t *testing.T) {
			bin := filepath.Join(t.TempDir(), "cxxgcc")
			if out, err := exec.Command(objcopy, "--compress-debug-sections="+how, orig, bin).CombinedOutput(); err != nil {
				t.Fatalf("objcopy: %v\n%s", err, out)
			}
			if got := encodeELF(t, bin); !bytes.Equal(got, want) {
				t.Errorf("%d bytes, %d from the uncompressed binary", len(got), len(want))
			}
		})
	}
}

func encodeELF(t *testing.T, path string) []byte {
	t.Helper()
	c, st, err := ELF(path, Options{DebugDirs: []string{t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Encode(gsym.EncodeOptions{ByteOrder: st.ByteOrder})
	if err != nil {
		t.Fatal(err)
	}
	return b
}
