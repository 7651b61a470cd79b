package cpython

import (
	"encoding/hex"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/sprof/sprof/internal/testenv"
)

// dumpLines prints, for every code object compiled from the files given,
// its first line, its location table and the line CPython's own
// co_positions gives each code unit: the oracle for lineAt.
const dumpLines = `
import json, sys
def walk(co):
    yield co
    for c in co.co_consts:
        if hasattr(c, "co_code"):
            yield from walk(c)
out = []
for path in sys.argv[1:]:
    with open(path) as f:
        top = compile(f.read(), path, "exec")
    for co in walk(top):
        out.append({"name": co.co_qualname, "first": co.co_firstlineno, "table": co.co_linetable.hex(),
                    "lines": [p[0] if p[0] is not None else 0 for p in co.co_positions()]})
print(json.dumps(out))
`

// TestLineAtMatchesCPython checks lineAt against the line CPython gives
// every code unit of every code object of the fixture and of the json
// module's encoder, for each interpreter installed.
func TestLineAtMatchesCPython(t *testing.T) {
	pythons := []string{"/usr/bin/python3.11"}
	for _, v := range []string{"3.12", "3.13"} {
		if m, _ := filepath.Glob("/root/.pyenv/versions/" + v + ".*/bin/python" + v); len(m) > 0 {
			pythons = append(pythons, m[0])
		}
	}
	testenv.RequireTool(t, pythons[0])
	for _, python := range pythons {
		t.Run(filepath.Base(python), func(t *testing.T) {
			lib, err := exec.Command(python, "-c", "import json.encoder; print(json.encoder.__file__, end='')").Output()
			if err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(python, "-c", dumpLines, "../../testdata/python/chain.py", string(lib)).Output()
			if err != nil {
				t.Fatal(err)
			}
			var codes []struct {
				Name  string
				First int
				Table string
				Lines []int
			}
			if err := json.Unmarshal(out, &codes); err != nil {
				t.Fatal(err)
			}
			units := 0
			for _, c := range codes {
				table, err := hex.DecodeString(c.Table)
				if err != nil {
					t.Fatal(err)
				}
				for i, want := range c.Lines {
					got, ok := lineAt(table, c.First, i)
					if !ok {
						got = 0
					}
					if got != want {
						t.Errorf("%s: code unit %d: line %d, CPython says %d", c.Name, i, got, want)
						break
					}
					units++
				}
			}
			if len(codes) < 10 || units < 500 {
				t.Fatalf("only %d code objects, %d code units checked", len(codes), units)
			}
		})
	}
}
