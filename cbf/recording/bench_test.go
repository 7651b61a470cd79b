package recording

import (
	"bytes"
	"io"
	"os"
	"testing"
	"time"

	"github.com/sprof/sprof/cbf"
	"github.com/sprof/sprof/cbf/internal/cputime"
)

// countingWriter counts the bytes written to it.
type countingWriter struct{ n int64 }

func (c *countingWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return len(p), nil
}

// fixtureSamples returns the samples and process records of the real
// fixture (perf record -g of the Go compiler, testdata/cbf/gobuild.sprof)
// in time order.
func fixtureSamples(b *testing.B) ([]sample, []Process) {
	data, err := os.ReadFile(fixture)
	if err != nil {
		b.Fatal(err)
	}
	_, samples, procs, _, err := readAll(b, data)
	if err != io.EOF {
		b.Fatal(err)
	}
	sortSamples(samples)
	return samples, procs
}

// replay writes samples (in time order) and procs to out as a recording
// with a chunk a second of recorded time.
func replay(tb testing.TB, out io.Writer, samples []sample, procs []Process) {
	clock := newFakeClock()
	w, err := NewWriter(out, Options{Clock: clock.now})
	if err != nil {
		tb.Fatal(err)
	}
	next := 0
	for _, s := range samples {
		clock.t = clock.at(s.t)
		for next < len(procs) && procs[next].Time <= s.t {
			w.addProcess(procs[next])
			next++
		}
		w.Sample(clock.t, s.pid, s.tid, s.cpu, s.comm, s.user, s.kernel, s.flags, s.weight)
	}
	for _, pr := range procs[next:] {
		w.addProcess(pr)
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
}

func frameCount(samples []sample) int {
	frames := 0
	for _, s := range samples {
		frames += len(s.user) + len(s.kernel)
	}
	return frames
}

// BenchmarkWriter replays the samples of the real fixture through a
// Writer and reports the cost and size of a sample and of a frame.
func BenchmarkWriter(b *testing.B) {
	samples, procs := fixtureSamples(b)
	var out countingWriter
	var cpu time.Duration
	var last bytes.Buffer
	for b.Loop() {
		out.n = 0
		last.Reset()
		meter := cputime.Start()
		replay(b, io.MultiWriter(&out, &last), samples, procs)
		cpu += meter.Stop()
	}
	frames := frameCount(samples)
	n := float64(b.N) * float64(len(samples))
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/sample")
	b.ReportMetric(float64(cpu.Nanoseconds())/n, "cpu-ns/sample")
	b.ReportMetric(float64(out.n)/float64(len(samples)), "bytes/sample")
	// Everything in the file (maps, times, names) per frame sampled, and
	// the stack table alone.
	b.ReportMetric(float64(out.n)/float64(frames), "bytes/frame")
	b.ReportMetric(float64(chunkBytes(b, last.Bytes(), ChunkStacks))/float64(frames), "stack-bytes/frame")
}

// BenchmarkReader reads the recording of the real fixture as a report
// does: every chunk, every group, and the frames of every sample's stacks.
func BenchmarkReader(b *testing.B) {
	samples, procs := fixtureSamples(b)
	var file bytes.Buffer
	replay(b, &file, samples, procs)
	var frames []cbf.Frame
	nframes := 0
	for b.Loop() {
		nframes = 0
		r, err := NewReader(bytes.NewReader(file.Bytes()))
		if err != nil {
			b.Fatal(err)
		}
		for {
			c, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			if c.Type != ChunkSamples {
				continue
			}
			batch, err := c.Batch()
			if err != nil {
				b.Fatal(err)
			}
			for _, g := range batch.Groups {
				for _, s := range [...]int{g.User, g.Kernel} {
					if s >= 0 {
						frames = batch.Stacks.Stack(frames[:0], s)
						nframes += len(frames) * len(g.Times)
					}
				}
			}
		}
	}
	if nframes < frameCount(samples) {
		b.Fatalf("read %d frames; the samples have %d", nframes, frameCount(samples))
	}
	n := float64(b.N)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n/float64(len(samples)), "ns/sample")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n/float64(nframes), "ns/frame")
}

// chunkBytes returns the bytes the chunks of type t take in a recording.
func chunkBytes(b *testing.B, data []byte, t ChunkType) int {
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for {
		c, err := r.Next()
		if err != nil {
			return n
		}
		if c.Type == t {
			n += chunkHead + len(c.Payload) + chunkTail
		}
	}
}
