// Package golden compares test output with golden files under testdata,
// and rewrites them when tests run with -update, for the tests of
// exporters/ and its subpackages.
package golden

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files instead of comparing with them")

// Check compares got with the file at path, or writes it there with
// -update. On a mismatch it shows both when they are short enough to read.
func Check(t testing.TB, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if bytes.Equal(got, want) {
		return
	}
	if len(got)+len(want) < 8<<10 {
		t.Errorf("%s differs (go test -update rewrites it)\ngot:\n%s\nwant:\n%s", path, got, want)
	} else {
		t.Errorf("%s differs (go test -update rewrites it)", path)
	}
}
