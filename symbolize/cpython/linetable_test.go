package cpython

import (
	"encoding/hex"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/sprof/sprof/internal/pychain"
)

// dumpLines prints, for every code object compiled from the files given,
// its first line, its line table and the line CPython's own accessors
// give each code unit: co_positions from 3.11, co_lines in 3.10, and in
// 3.9 dis.findlinestarts. The oracle for the line readers.
const dumpLines = `
import dis, json, sys
def lines(co):
    n = len(co.co_code) // 2
    if hasattr(co, "co_positions"):
        return [p[0] if p[0] is not None else 0 for p in co.co_positions()]
    out = [0] * n
    if hasattr(co, "co_lines"):
        for start, end, line in co.co_lines():
            for i in range(start // 2, min(end // 2, n)):
                out[i] = line if line is not None else 0
        return out
    starts = dict(dis.findlinestarts(co))
    line = co.co_firstlineno
    for i in range(n):
        line = starts.get(2 * i, line)
        out[i] = line
    return out
def table(co):
    return co.co_linetable if hasattr(co, "co_linetable") else co.co_lnotab
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
        out.append({"name": co.co_name, "first": co.co_firstlineno, "table": table(co).hex(), "lines": lines(co)})
print(json.dumps(out))
`

// TestLineAtMatchesCPython checks the line readers against the line
// CPython gives every code unit of every code object of the fixture and of
// the json module's encoder, for each interpreter installed.
func TestLineAtMatchesCPython(t *testing.T) {
	for _, python := range pychain.Interpreters(t) {
		t.Run(filepath.Base(python), func(t *testing.T) {
			v, ok := Interpreter(python)
			if !ok {
				t.Fatalf("%s: no version in its name", python)
			}
			lineAt := lineReader(v)
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
