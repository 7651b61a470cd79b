package collector

import (
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sprof/sprof/sframe"
)

// TestBuildBounds: a binary with more CFI than a build may read, or whose
// table outgrows the cache, gets no table, and the reason is what
// --debug-unwind prints for it.
func TestBuildBounds(t *testing.T) {
	u, set, _ := benchStack(t, 2)
	lib := &set.maps[1]
	in := u.info(lib)
	table := in.table
	in.table, in.built, in.cfiBytes = nil, false, maxBuildInput+1
	if !u.ensureTable(in, 1, lib) || in.table != nil || in.building {
		t.Fatalf("a binary over the CFI bound: built %v, table %v, building %v; want no table at once", in.built, in.table != nil, in.building)
	}
	if text := in.tableText(); !strings.HasPrefix(text, "none: ") || !strings.Contains(text, "MiB of CFI") {
		t.Errorf("table text %q, want the CFI bound", text)
	}

	in.built, in.err, in.cfiBytes = false, nil, 1
	u.budget = table.MemSize() - 1
	self, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	lib.bin.pinned = self
	u.builds = newTableBuilder(func(io.ReaderAt, string, bool) (*sframe.Table, Method, error, error) {
		return table, MethodEHFrame, nil, nil
	})
	if u.ensureTable(in, 1, lib) || !in.building {
		t.Fatalf("ensureTable: built %v, building %v; want a build under way", in.built, in.building)
	}
	if !u.builds.wait(10 * time.Second) {
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

// TestBuildOrder: the builder runs one build at a time, the queued ones
// with the least CFI first.
func TestBuildOrder(t *testing.T) {
	var (
		mu      sync.Mutex
		order   []string
		running int
		most    int
	)
	gate := make(chan struct{})
	b := newTableBuilder(func(_ io.ReaderAt, name string, _ bool) (*sframe.Table, Method, error, error) {
		mu.Lock()
		order = append(order, name)
		running++
		most = max(most, running)
		mu.Unlock()
		<-gate
		mu.Lock()
		running--
		mu.Unlock()
		return nil, 0, nil, io.EOF
	})
	defer b.close()
	submit := func(name string, cost int64) {
		f, err := os.Open(os.Args[0])
		if err != nil {
			t.Fatal(err)
		}
		b.submit(&buildJob{file: f, name: name, cost: cost})
	}
	submit("first", 100)
	for len(snapshot(&mu, &order)) == 0 {
		time.Sleep(time.Millisecond) // the worker has taken the first job
	}
	submit("large", 300)
	submit("small", 10)
	submit("medium", 200)
	close(gate)
	deadline := time.Now().Add(10 * time.Second)
	for n := 0; n < 4 && time.Now().Before(deadline); {
		n += len(b.take())
		b.wait(10 * time.Millisecond)
	}
	if got, want := snapshot(&mu, &order), []string{"first", "small", "medium", "large"}; !slices.Equal(got, want) || most != 1 {
		t.Errorf("built %q, at most %d at a time; want %q, one at a time", got, most, want)
	}
}

func snapshot(mu *sync.Mutex, s *[]string) []string {
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(*s)
}
