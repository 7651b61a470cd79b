package symbolize

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sprof/sprof/stacks"
)

// TestGSYMBatchMatchesSingle symbolizes every byte of the executable
// segments of C, C++ and Go fixtures (the Go one on every fifth byte),
// plus offsets outside them, in one shuffled SymbolizeBatch and one
// offset at a time: the frames must be equal, ELF fallbacks included.
func TestGSYMBatchMatchesSingle(t *testing.T) {
	needTool(t, "readelf")
	for _, c := range []struct {
		name, path string
		step       uint64
	}{{"c-O2", fixture("c-O2"), 1}, {"cpp-O2", fixture("cpp-O2"), 1}, {"go", buildGo(t, ""), 5}} {
		t.Run(c.name, func(t *testing.T) {
			b := Binary{Path: c.path}
			s, err := NewGSYM(GSYMOptions{CacheDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			offs := []uint64{0, 1 << 40}
			for _, l := range readelfLoads(t, b.Path) {
				if l.exec {
					for o := l.off; o < l.off+l.filesz; o += c.step {
						offs = append(offs, o)
					}
				}
			}
			rand.New(rand.NewPCG(7, 8)).Shuffle(len(offs), func(i, j int) { offs[i], offs[j] = offs[j], offs[i] })
			got := make([][]stacks.Frame, len(offs))
			calls := 0
			if err := s.SymbolizeBatch(b, offs, func(i int, frames []stacks.Frame) {
				got[i] = slices.Clone(frames)
				calls++
			}); err != nil {
				t.Fatal(err)
			}
			if calls != len(offs) {
				t.Fatalf("%d calls for %d offsets", calls, len(offs))
			}
			var want []stacks.Frame
			named := 0
			for i, off := range offs {
				if want, err = s.Symbolize(want[:0], b, off); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got[i], want) {
					t.Fatalf("offset %#x: batch %v, single %v", off, got[i], want)
				}
				if len(want) > 0 {
					named++
				}
			}
			if named < len(offs)/2 {
				t.Errorf("only %d of %d offsets named", named, len(offs))
			}
		})
	}
}
