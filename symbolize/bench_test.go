package symbolize

import (
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/sprof/sprof/stacks"
)

// benchOffsets returns file offsets one byte into every function of the
// binary, as a profile's addresses would land.
func benchOffsets(b *testing.B, s *ELF, bin Binary) []uint64 {
	if _, err := os.Stat(bin.Path); err != nil {
		b.Skip(err)
	}
	img, err := s.image(bin)
	if err != nil {
		b.Fatal(err)
	}
	var offs []uint64
	for _, seg := range img.loads {
		if !seg.Exec {
			continue
		}
		for _, a := range img.syms.start {
			if a >= seg.Vaddr && a-seg.Vaddr < seg.Filesz {
				offs = append(offs, a-seg.Vaddr+seg.Off+1)
			}
		}
		if img.gol != nil {
			for _, fn := range img.gol.tab.Funcs {
				if fn.Entry >= seg.Vaddr && fn.Entry-seg.Vaddr < seg.Filesz {
					offs = append(offs, fn.Entry-seg.Vaddr+seg.Off+1)
				}
			}
		}
	}
	if len(offs) == 0 {
		b.Fatal("no functions")
	}
	return offs
}

// BenchmarkSymbolizeWarm measures a lookup with the binary's tables
// cached: libc with its debug file (names, files and lines), a C++ binary
// (demangled names), this Go test binary (pclntab, inlined calls from
// DWARF) and the Go fixture stripped (pclntab, inlined calls from its
// inline trees), each named by build ID as the collector names them; and
// libc without its build ID, which costs a stat(2) per lookup to key the
// cache by file identity.
func BenchmarkSymbolizeWarm(b *testing.B) {
	for _, c := range []struct {
		name, path string
		byID       bool
	}{
		{"libc", libc, true},
		{"cpp", fixture("cpp-O2"), true},
		{"go", os.Args[0], true},
		{"go-stripped", "", true},
		{"libc-by-stat", libc, false},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := NewELF(Options{})
			path := c.path
			if path == "" {
				path = buildGo(b, "-s -w")
			}
			bin := Binary{Path: path}
			if c.byID {
				id, err := buildIDOf(path)
				if err != nil {
					// Go's toolchain writes no GNU build ID; any
					// stable key serves the cache.
					id = "00000000"
				}
				bin.BuildID = id
			}
			offs := benchOffsets(b, s, bin)
			var frames []stacks.Frame
			n := 0
			cpu0 := cpuTime()
			for b.Loop() {
				var err error
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

// BenchmarkLoad measures building a binary's tables from scratch, the
// one-time cost per binary: libc with its debug file (symbols, lines and
// inlined calls from DWARF) and the Go fixture (pclntab, and inlined
// calls from DWARF). It reports CPU time too, which a busy machine
// distorts less than wall time.
func BenchmarkLoad(b *testing.B) {
	for _, c := range []struct {
		name string
		path func() string
	}{
		{"libc", func() string { return libc }},
		{"go", func() string { return buildGo(b, "") }},
	} {
		b.Run(c.name, func(b *testing.B) {
			path := c.path()
			if _, err := os.Stat(path); err != nil {
				b.Skip(err)
			}
			cpu0 := cpuTime()
			for b.Loop() {
				s := NewELF(Options{})
				if _, err := s.image(Binary{Path: path}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/binary")
			b.ReportMetric(float64((cpuTime()-cpu0).Milliseconds())/float64(b.N), "cpu-ms/binary")
		})
	}
}

// cpuTime returns the user and system CPU time of the process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
