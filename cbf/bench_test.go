package cbf_test

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/sprof/sprof/cbf/internal/cputime"

	"github.com/sprof/sprof/cbf"
	"github.com/sprof/sprof/cbf/recording"
)

// fixtureStacks returns the stacks of every sample of the recording of real
// samples in testdata (perf record -g of the Go compiler at work), user and
// kernel stacks apart, one entry per sample.
func fixtureStacks(b *testing.B) [][]uint64 {
	f, err := os.Open("../testdata/cbf/gobuild.sprof")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	r, err := recording.NewReader(f)
	if err != nil {
		b.Fatal(err)
	}
	var stacks [][]uint64
	var frames []cbf.Frame
	for {
		c, err := r.Next()
		if errors.Is(err, io.EOF) {
			return stacks
		}
		if err != nil {
			b.Fatal(err)
		}
		if c.Type != recording.ChunkSamples {
			continue
		}
		batch, err := c.Batch()
		if err != nil {
			b.Fatal(err)
		}
		for _, g := range batch.Groups {
			for _, s := range []int{g.User, g.Kernel} {
				if s < 0 {
					continue
				}
				var pcs []uint64
				for _, f := range batch.Stacks.Stack(frames[:0], s) {
					if f.Kind != cbf.Truncated {
						pcs = append(pcs, f.Addr)
					}
				}
				for range g.Times {
					stacks = append(stacks, pcs)
				}
			}
		}
	}
}

// syntheticStacks models a service written in C++: 30 to 60 frames from
// the start routine through a request loop and handlers in a large main
// binary, down through libstdc++ into libc, along a few hot paths that
// recur, with recursion here and there.
func syntheticStacks(n int) [][]uint64 {
	rng := rand.New(rand.NewPCG(7, 8))
	const (
		mainBin  = 0x555555554000 // 12 MiB of text
		libstdcx = 0x7ffff7a00000
		libc     = 0x7ffff7600000
		libssl   = 0x7ffff7e00000
	)
	fn := func(base uint64, span int) uint64 { return base + uint64(rng.IntN(span)) }
	// The root: _start, __libc_start_main, main, the server's loops.
	root := []uint64{fn(mainBin, 1<<12), fn(libc, 1<<16), fn(mainBin, 1<<20)}
	for range 5 {
		root = append(root, fn(mainBin, 12<<20))
	}
	// Hot paths: handler chains where callees sit near their callers.
	var paths [][]uint64
	for range 24 {
		p := []uint64{}
		at := fn(mainBin, 12<<20)
		for range 20 + rng.IntN(30) {
			if rng.IntN(4) == 0 {
				at = fn(mainBin, 12<<20) // a call into another module
			} else {
				at = uint64(int64(at) + int64(rng.IntN(1<<15)) - 1<<14)
			}
			p = append(p, at)
			if rng.IntN(10) == 0 { // recursion
				for range 1 + rng.IntN(4) {
					p = append(p, at)
				}
			}
		}
		paths = append(paths, p)
	}
	stacks := make([][]uint64, n)
	for i := range stacks {
		p := paths[min(rng.IntN(len(paths)), rng.IntN(len(paths)))] // some paths hotter
		var leaf []uint64
		switch rng.IntN(3) {
		case 0:
			leaf = []uint64{fn(libc, 1<<20), fn(libstdcx, 1<<20), fn(libstdcx, 1<<20)}
		case 1:
			leaf = []uint64{fn(libc, 1<<20), fn(libssl, 1<<19)}
		default:
			leaf = []uint64{fn(mainBin, 12<<20)}
		}
		s := append(leaf, p[:len(p)-rng.IntN(3)]...)
		for j := len(root) - 1; j >= 0; j-- {
			s = append(s, root[j])
		}
		stacks[i] = s[:min(len(s), 60)]
	}
	return stacks
}

func benchStacks(b *testing.B, name string, stacks [][]uint64) {
	frames := 0
	for _, s := range stacks {
		frames += len(s)
	}
	recs := make([][]byte, len(stacks))
	size := 0
	for i, s := range stacks {
		recs[i] = cbf.AppendStack(nil, cbf.Word64, s, false)
		size += len(recs[i])
	}
	perFrame := func(b *testing.B, cpu time.Duration) {
		// Wall time per frame, and CPU time: the machines that run these
		// benchmarks are shared, and wall time counts others' turns.
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)*float64(len(stacks))/float64(frames), "ns/frame")
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)*float64(len(stacks))/float64(frames), "cpu-ns/frame")
	}
	b.Run(name+"/encode", func(b *testing.B) {
		var buf []byte
		cpu := cputime.Start()
		for i := 0; b.Loop(); i++ {
			buf = cbf.AppendStack(buf[:0], cbf.Word64, stacks[i%len(stacks)], false)
		}
		perFrame(b, cpu.Stop())
		b.ReportMetric(float64(size)/float64(frames), "bytes/frame")
		b.ReportMetric(float64(size)/float64(len(stacks)), "bytes/stack")
	})
	// The same stacks as samples of a recording (a sample each 10 ms, all
	// of one thread): its stack table stores each distinct stack once,
	// sharing outer frames, so a sampled frame costs less than a CBF
	// frame. table-bytes counts the stacks chunks, file-bytes all of it.
	b.Run(name+"/recording", func(b *testing.B) {
		var file bytes.Buffer
		cpu := cputime.Start()
		for b.Loop() {
			file.Reset()
			writeSamples(b, &file, stacks)
		}
		n := float64(b.N) * float64(frames)
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/frame")
		b.ReportMetric(float64(cpu.Stop().Nanoseconds())/n, "cpu-ns/frame")
		s, err := recording.Summarize(bytes.NewReader(file.Bytes()))
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(s.Bytes[recording.ChunkStacks])/float64(frames), "table-bytes/frame")
		b.ReportMetric(float64(file.Len())/float64(frames), "file-bytes/frame")
		b.ReportMetric(float64(file.Len())/float64(len(stacks)), "file-bytes/sample")
	})
	b.Run(name+"/decode", func(b *testing.B) {
		out := make([]cbf.Frame, 0, 256)
		b.ReportAllocs()
		cpu := cputime.Start()
		for i := 0; b.Loop(); i++ {
			var err error
			if out, _, err = cbf.Decode(out[:0], recs[i%len(recs)]); err != nil {
				b.Fatal(err)
			}
		}
		perFrame(b, cpu.Stop())
	})
}

// writeSamples writes each stack as the user stack of a sample.
func writeSamples(b *testing.B, out io.Writer, stacks [][]uint64) {
	start := time.Unix(1_700_000_000, 0)
	now := start
	w, err := recording.NewWriter(out, recording.Options{Frequency: 99, Start: start, Clock: func() time.Time { return now }})
	if err != nil {
		b.Fatal(err)
	}
	for _, s := range stacks {
		now = now.Add(10 * time.Millisecond)
		if err := w.Sample(now, 1, 1, 0, "app", s, nil, 0, 1); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkCBF measures CBF on real stacks (the perf fixture: the Go
// compiler, a 20 MB binary, plus kernel stacks) and on synthetic ones
// shaped like a C++ service (30–60 frames across a main binary and shared
// libraries, repeated hot paths): plain per-stack CBF (encode, decode;
// bytes/frame), and the stacks as the samples of a recording (recording;
// table-bytes/frame, file-bytes/frame).
func BenchmarkCBF(b *testing.B) {
	benchStacks(b, "fixture", fixtureStacks(b))
	benchStacks(b, "synthetic", syntheticStacks(4096))
}

func BenchmarkLookup(b *testing.B) {
	var images []cbf.Image
	for i := range 300 {
		base := 0x7f0000000000 + uint64(i)<<24
		images = append(images, cbf.Image{Path: "/usr/lib/x", Base: base, EndOfText: base + 1<<20})
	}
	m, err := cbf.NewImageMap("", cbf.Word64, images)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	addrs := make([]uint64, 4096)
	for i := range addrs {
		addrs[i] = 0x7f0000000000 + rng.Uint64N(300<<24)
	}
	cpu := cputime.Start()
	for i := 0; b.Loop(); i++ {
		m.Lookup(addrs[i%len(addrs)])
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/lookup")
	b.ReportMetric(float64(cpu.Stop().Nanoseconds())/float64(b.N), "cpu-ns/lookup")
}
