package sframe

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the JSON golden files in testdata/sframe")

// fixtures returns the committed fixture binaries: every file in
// testdata/sframe with a readelf golden output next to it.
func fixtures(t testing.TB) []string { return fixtureFiles(t, ".readelf", 10) }

// fixtureFiles returns the paths of the files in testdata/sframe named
// NAME+ext, without ext, and fails if there are fewer than least.
func fixtureFiles(t testing.TB, ext string, least int) []string {
	t.Helper()
	files, err := filepath.Glob("../testdata/sframe/*" + ext)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < least {
		t.Fatalf("found %d files *%s in testdata/sframe, want at least %d", len(files), ext, least)
	}
	for i := range files {
		files[i] = strings.TrimSuffix(files[i], ext)
	}
	return files
}

// TestWriteTextMatchesReadelf compares our dump of every fixture with the
// output of `readelf --sframe` from the toolchain that built it, byte for
// byte: no normalization is needed.
func TestWriteTextMatchesReadelf(t *testing.T) {
	for _, bin := range fixtures(t) {
		t.Run(filepath.Base(bin), func(t *testing.T) {
			tab, err := Open(bin)
			if err != nil {
				t.Fatal(err)
			}
			if len(tab.Errors) > 0 {
				t.Errorf("FDEs left out: %v", tab.Errors)
			}
			var got bytes.Buffer
			if err := tab.WriteText(&got); err != nil {
				t.Fatal(err)
			}
			want := readFile(t, bin+".readelf")
			if got.String() != string(want) {
				t.Errorf("dump differs from readelf:\n%s", lineDiff(string(want), got.String()))
			}
		})
	}
}

// TestWriteJSONGolden keeps the JSON dump of the assembler fixtures (every
// rule kind: FP-based CFA, PAC, outermost, FLEX, big-endian) stable.
func TestWriteJSONGolden(t *testing.T) {
	bins, err := filepath.Glob("../testdata/sframe/[af][sl]*-v[123]")
	if err != nil || len(bins) < 8 {
		t.Fatalf("%d fixtures, %v", len(bins), err)
	}
	for _, bin := range bins {
		tab, err := Open(bin)
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if err := tab.WriteJSON(&got); err != nil {
			t.Fatal(err)
		}
		golden := bin + ".json"
		if *update {
			if err := os.WriteFile(golden, got.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if want := readFile(t, golden); !bytes.Equal(got.Bytes(), want) {
			t.Errorf("%s: JSON differs from %s (run with -update if intended):\n%s", bin, golden, lineDiff(string(want), got.String()))
		}
	}
}

// lineDiff lists the lines that differ between want and got.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for i := 0; i < max(len(w), len(g)); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			b.WriteString("line " + itoa(i+1) + ":\n  readelf: " + quote(wl) + "\n  sprof:   " + quote(gl) + "\n")
		}
	}
	return b.String()
}
