package convert

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
)

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestDebugFileLookup finds the separate debug file by build ID under a
// debug directory, by .gnu_debuglink next to the binary, and not at all
// when neither is there (leaving a conversion without DWARF).
func TestDebugFileLookup(t *testing.T) {
	llvm := openFixture(t, "debuglink.llvm.gsym")
	id := hex.EncodeToString(llvm.Header().UUID)
	debug := filepath.Join(fixtures, "debuglink.debug")

	byID := t.TempDir()
	bin := filepath.Join(byID, "bin", "debuglink")
	copyFile(t, filepath.Join(fixtures, "debuglink"), bin)
	want := filepath.Join(byID, "lib", ".build-id", id[:2], id[2:]+".debug")
	copyFile(t, debug, want)

	byLink := t.TempDir()
	copyFile(t, filepath.Join(fixtures, "debuglink"), filepath.Join(byLink, "debuglink"))
	copyFile(t, debug, filepath.Join(byLink, ".debug", "debuglink.debug"))

	alone := t.TempDir()
	copyFile(t, filepath.Join(fixtures, "debuglink"), filepath.Join(alone, "debuglink"))
	// A debug file whose CRC does not match the link is not used.
	if err := os.WriteFile(filepath.Join(alone, "debuglink.debug"), []byte("\x7fELF not this one"), 0o644); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name, bin, dir, want string
	}{
		{"build ID", bin, filepath.Join(byID, "lib"), want},
		{".gnu_debuglink", filepath.Join(byLink, "debuglink"), t.TempDir(), filepath.Join(byLink, ".debug", "debuglink.debug")},
		{"none", filepath.Join(alone, "debuglink"), t.TempDir(), ""},
	} {
		c, st, err := ELF(tc.bin, Options{DebugDirs: []string{tc.dir}})
		if tc.want == "" {
			if err == nil && (st.DebugFile != "" || st.HasDWARF) {
				t.Errorf("%s: used debug file %q", tc.name, st.DebugFile)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if st.DebugFile != tc.want || st.FromDWARF == 0 || c.NumFunctions() != llvm.NumFunctions() {
			t.Errorf("%s: debug file %q (want %q), %d from DWARF, %d functions (LLVM %d)", tc.name, st.DebugFile, tc.want, st.FromDWARF, c.NumFunctions(), llvm.NumFunctions())
		}
	}
}
