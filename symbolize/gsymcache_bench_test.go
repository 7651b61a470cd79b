package symbolize

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sprof/sprof/stacks"
	"github.com/sprof/sprof/symbolize/gsym"
)

// BenchmarkGSYMWarm measures a lookup through a GSYM symbolizer whose
// file is converted and mapped: libc with its debug file and the C++
// fixture, at the offsets BenchmarkSymbolizeWarm uses; and libc named
// without its build ID, which the symbolizer then keys by a stat of the
// file at every call (Go binaries carry no GNU build ID).
func BenchmarkGSYMWarm(b *testing.B) {
	for _, c := range []struct {
		name, path string
		byID       bool
	}{
		{"libc", libc, true},
		{"cpp", fixture("cpp-O2"), true},
		{"libc-by-stat", libc, false},
	} {
		b.Run(c.name, func(b *testing.B) {
			if _, err := os.Stat(c.path); err != nil {
				b.Skip(err)
			}
			bin := Binary{Path: c.path}
			if c.byID {
				id, err := buildIDOf(c.path)
				if err != nil {
					b.Fatal(err)
				}
				bin.BuildID = id
			}
			offs := benchOffsets(b, NewELF(Options{}), bin)
			s, err := NewGSYM(GSYMOptions{CacheDir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			// One pass first: the conversion, and the ELF symbolizer's
			// loading for the addresses it answers, are one-time costs
			// (BenchmarkGSYMFirstLookup).
			var frames []stacks.Frame
			for _, off := range offs {
				if frames, err = s.Symbolize(frames[:0], bin, off); err != nil {
					b.Fatal(err)
				}
			}
			n := 0
			cpu0 := cpuTime()
			for b.Loop() {
				frames, err = s.Symbolize(frames[:0], bin, offs[n%len(offs)])
				if err != nil {
					b.Fatal(err)
				}
				n++
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/lookup")
			b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(n), "cpu-ns/lookup")
		})
	}
}

// BenchmarkGSYMFirstLookup measures the one-time cost per binary: the
// first lookup of a new symbolizer, which converts libc with its debug
// file ("convert") or maps the file an earlier run left ("cached").
// BenchmarkLoad/libc is the ELF symbolizer's cost for the same binary.
func BenchmarkGSYMFirstLookup(b *testing.B) {
	if _, err := os.Stat(libc); err != nil {
		b.Skip(err)
	}
	id, err := buildIDOf(libc)
	if err != nil {
		b.Fatal(err)
	}
	bin := Binary{Path: libc, BuildID: id}
	for _, cached := range []bool{false, true} {
		name := "convert"
		if cached {
			name = "cached"
		}
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			cpu0 := cpuTime()
			for b.Loop() {
				if !cached {
					b.StopTimer()
					os.RemoveAll(dir)
					b.StartTimer()
				}
				s, err := NewGSYM(GSYMOptions{CacheDir: dir})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := s.Symbolize(nil, bin, 0x30000); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/binary")
			b.ReportMetric(float64((cpuTime()-cpu0).Milliseconds())/float64(b.N), "cpu-ms/binary")
		})
	}
}

// BenchmarkGSYMBatch measures SymbolizeBatch on BenchmarkGSYMWarm's
// offsets (one byte into every function of libc with its debug file, and
// of the C++ fixture), all in one batch, per offset.
func BenchmarkGSYMBatch(b *testing.B) {
	for _, c := range []struct{ name, path string }{{"libc", libc}, {"cpp", fixture("cpp-O2")}} {
		b.Run(c.name, func(b *testing.B) {
			if _, err := os.Stat(c.path); err != nil {
				b.Skip(err)
			}
			id, err := buildIDOf(c.path)
			if err != nil {
				b.Fatal(err)
			}
			bin := Binary{Path: c.path, BuildID: id}
			offs := benchOffsets(b, NewELF(Options{}), bin)
			s, err := NewGSYM(GSYMOptions{CacheDir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			named := 0
			count := func(i int, frames []stacks.Frame) {
				if len(frames) > 0 {
					named++
				}
			}
			// The conversion and the ELF symbolizer's loading are
			// one-time costs (BenchmarkGSYMFirstLookup).
			if err := s.SymbolizeBatch(bin, offs, count); err != nil {
				b.Fatal(err)
			}
			if named < len(offs)/2 {
				b.Fatalf("only %d of %d offsets named", named, len(offs))
			}
			n := 0
			cpu0 := cpuTime()
			for b.Loop() {
				if err := s.SymbolizeBatch(bin, offs, count); err != nil {
					b.Fatal(err)
				}
				n += len(offs)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/lookup")
			b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(n), "cpu-ns/lookup")
		})
	}
}

// BenchmarkGSYMVerify measures what the cache's checksum adds to mapping
// a cached file, for libc with its debug file: "map" maps the file and
// reads its header and address index (gsym.Open), "map+verify" checks the
// checksum over every byte first (what the cache does), per file. The
// difference must stay well under the mapping itself.
func BenchmarkGSYMVerify(b *testing.B) {
	if _, err := os.Stat(libc); err != nil {
		b.Skip(err)
	}
	id, err := buildIDOf(libc)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	s, err := NewGSYM(GSYMOptions{CacheDir: dir})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.Symbolize(nil, Binary{Path: libc, BuildID: id}, 0x30000); err != nil {
		b.Fatal(err)
	}
	file := filepath.Join(dir, "gsym", id+".gsym")
	st, err := os.Stat(file)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		open func(string) (*gsym.Reader, error)
	}{{"map", gsym.Open}, {"map+verify", openCacheFile}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				r, err := c.open(file)
				if err != nil {
					b.Fatal(err)
				}
				r.Close()
			}
			b.SetBytes(st.Size())
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/file")
		})
	}
}
