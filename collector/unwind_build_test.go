package collector

import (
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sprof/sprof/sframe"
	"github.com/sprof/sprof/unwind"
)

// TestBuildBounds: a binary with more CFI than a build may read, or whose
// table outgrows the cache, gets no table, and the reason is what
// --debug-unwind prints for it.
func TestBuildBounds(t *testing.T) {
	u, set, _ := benchStack(t, 2)
	lib := &set.maps[1]
	in := u.info(lib)
	table := in.table
	in.table, in.built, in.cfiBytes = nil, false, unwind.MaxBuildInput+1
	if !u.ensureTable(in, 1, lib) || in.table != nil || in.building {
		t.Fatalf("a binary over the CFI bound: built %v, table %v, building %v; want no table at once", in.built, in.table != nil, in.building)
	}
	if text := in.tableText(); !strings.HasPrefix(text, "none: ") || !strings.Contains(text, "MiB of CFI") {
		t.Errorf("table text %q, want the CFI bound", text)
	}

	in.built, in.err, in.cfiBytes = false, nil, 1
	u.tables = unwind.NewTableCache[*unwindInfo](table.MemSize() - 1)
	self, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	lib.bin.pinned = self
	u.builds = unwind.NewBuilder[*unwindInfo](func(io.ReaderAt, string, bool) (*sframe.Table, unwind.Method, error, error) {
		return table, unwind.MethodEHFrame, nil, nil
	}, nil)
	if u.ensureTable(in, 1, lib) || !in.building {
		t.Fatalf("ensureTable: built %v, building %v; want a build under way", in.built, in.building)
	}
	if !u.builds.Wait(10 * time.Second) {
		t.Fatal("the build did not end")
	}
	u.install()
	if text := in.tableText(); in.table != nil || !strings.Contains(text, "more than the unwind cache") {
		t.Errorf("table %v, text %q; want none, over the cache budget", in.table != nil, text)
	}
	if u.stats.TableErrors != 2 || u.stats.Tables != 0 {
		t.Errorf("%d table errors, %d tables; want 2, 0", u.stats.TableErrors, u.stats.Tables)
	}
}
