package collector

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sprof/sprof/stacks"
	"github.com/sprof/sprof/symbolize"
	"github.com/sprof/sprof/symbolize/buildid"
)

// TestDeletedBinaryTwin: a process whose binary was gone before sprof
// could open it is symbolized from another file with the same build ID
// (the same program copied, or run again), and both mappings are marked
// as tried.
func TestDeletedBinaryTwin(t *testing.T) {
	src := "../testdata/e2e/shortlived"
	id, err := buildid.File(src)
	if err != nil {
		t.Fatal(err)
	}
	idBytes, _ := hex.DecodeString(id)
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	live := filepath.Join(t.TempDir(), "copy2")
	if err := os.WriteFile(live, data, 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := New(Options{Frequency: 99, ProcRoot: t.TempDir(), NoSideband: true, Symbolizer: openingSymbolizer{}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.events = []event{
		mmapEvent(1, 10, 0x1000, 0x2000, 0x1000, "/gone/copy1", idBytes),
		mmapEvent(1, 11, 0x1000, 0x2000, 0x1000, live, idBytes),
	}
	fsrc := &fakeSource{}
	fsrc.add(10, 5, 0x1010)
	fsrc.add(11, 5, 0x1010)
	if err := c.Drain(fsrc); err != nil {
		t.Fatal(err)
	}
	p := c.Profile()
	var got []string
	for _, s := range p.Samples {
		got = append(got, names(s)...)
		if m := s.Stack[0].Mapping; !m.SymbolsTried {
			t.Errorf("mapping %s not marked as tried", m.File)
		}
	}
	if want := []string{"/gone/copy1+0x1010", live + "+0x1010"}; !slices.Equal(got, want) {
		t.Errorf("names %q, want %q", got, want)
	}
}

// openingSymbolizer is a fakeSymbolizer that fails, as a real one does,
// when the binary's path does not open.
type openingSymbolizer struct{ fakeSymbolizer }

func (o openingSymbolizer) Symbolize(dst []stacks.Frame, b symbolize.Binary, off uint64) ([]stacks.Frame, error) {
	f, err := os.Open(b.Path)
	if err != nil {
		return dst, err
	}
	f.Close()
	return o.fakeSymbolizer.Symbolize(dst, b, off)
}
