package sframe

import (
	"bytes"
	"encoding/json"
	"flag"
	"go/ast"
	goparser "go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
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

// TestJSONFieldsDocumented checks that every field name the JSON dump
// writes is named in WriteJSON's doc comment, which is where
// `sprof sframe dump --json` sends its users.
func TestJSONFieldsDocumented(t *testing.T) {
	file, err := goparser.ParseFile(token.NewFileSet(), "dump.go", nil, goparser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var doc string
	for _, d := range file.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "WriteJSON" {
			doc = fn.Doc.Text()
		}
	}
	documented := map[string]bool{}
	for _, w := range regexp.MustCompile(`[a-z_]+`).FindAllString(doc, -1) {
		documented[w] = true
	}
	var keys func(v any)
	seen := map[string]bool{}
	keys = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				seen[k] = true
				keys(e)
			}
		case []any:
			for _, e := range v {
				keys(e)
			}
		}
	}
	for _, name := range []string{"flex-amd64-v3", "asm-arm64-v3", "chain-amd64-v2"} {
		tab, err := Open("../testdata/sframe/" + name)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := tab.WriteJSON(&b); err != nil {
			t.Fatal(err)
		}
		var v any
		if err := json.Unmarshal(b.Bytes(), &v); err != nil {
			t.Fatal(err)
		}
		keys(v)
	}
	if len(seen) < 20 {
		t.Fatalf("only %d JSON fields seen", len(seen))
	}
	for k := range seen {
		if !documented[k] {
			t.Errorf("JSON field %q is not in WriteJSON's doc comment", k)
		}
	}
}

// TestJSONPACKeyOnlyAArch64: pac_key says which key signs return addresses,
// which only aarch64 has; amd64 functions carry no such field.
func TestJSONPACKeyOnlyAArch64(t *testing.T) {
	for bin, want := range map[string]bool{"../testdata/sframe/asm-amd64-v3": false, "../testdata/sframe/asm-arm64-v3": true} {
		tab, err := Open(bin)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := tab.WriteJSON(&b); err != nil {
			t.Fatal(err)
		}
		var out struct {
			Functions []map[string]any `json:"functions"`
		}
		if err := json.Unmarshal(b.Bytes(), &out); err != nil {
			t.Fatal(err)
		}
		if len(out.Functions) == 0 {
			t.Fatalf("%s: no functions", bin)
		}
		for _, f := range out.Functions {
			if _, has := f["pac_key"]; has != want {
				t.Errorf("%s: function %v has pac_key: %v, want %v", bin, f["pc"], has, want)
			}
		}
	}
}
