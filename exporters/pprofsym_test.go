package exporters

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sprof/sprof/stacks"
)

// TestPprofSymbolizesPlaceholders checks that a placeholder does not stop
// pprof from symbolizing an address itself when it finds the binary: the
// test binary's own function, left unsymbolized in our profile, comes out
// by name from `go tool pprof -symbolize=local`.
func TestPprofSymbolizesPlaceholders(t *testing.T) {
	pc := uint64(reflect.ValueOf(TestPprofSymbolizesPlaceholders).Pointer())
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	m := executableMapping(t, exe, pc)
	p := &stacks.Profile{Period: 1e7, Mappings: []*stacks.Mapping{m},
		Samples: []*stacks.Sample{{Stack: []*stacks.Location{{Mapping: m, Address: pc}}, Count: 1}}}
	path := filepath.Join(t.TempDir(), "cpu.pb.gz")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := WritePprof(f, p, Options{}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if top := string(goTool(t, "pprof", "-top", "-symbolize=none", path)); !strings.Contains(top, m.Name()+"+0x") {
		t.Errorf("without symbolization pprof should show the placeholder:\n%s", top)
	}
	top := string(goTool(t, "pprof", "-top", "-symbolize=local", path))
	if !strings.Contains(top, "TestPprofSymbolizesPlaceholders") {
		t.Errorf("pprof did not symbolize the address from the binary:\n%s", top)
	}
}

// executableMapping finds the executable mapping of file that holds pc in
// /proc/self/maps.
func executableMapping(t *testing.T, file string, pc uint64) *stacks.Mapping {
	t.Helper()
	maps, err := os.Open("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	defer maps.Close()
	sc := bufio.NewScanner(maps)
	for sc.Scan() {
		var start, limit, offset uint64
		var perms, dev, inode, path string
		if n, _ := fmt.Sscanf(sc.Text(), "%x-%x %s %x %s %s %s", &start, &limit, &perms, &offset, &dev, &inode, &path); n == 7 &&
			path == file && pc >= start && pc < limit {
			return &stacks.Mapping{Kind: stacks.User, Start: start, Limit: limit, Offset: offset, File: file}
		}
	}
	t.Fatalf("no mapping of %s holds %#x", file, pc)
	return nil
}
