package recording

import (
	"bytes"
	"io"
	"os"
	"testing"
	"time"

	"github.com/sprof/sprof/cbf/internal/cputime"
)

// countingWriter counts the bytes written to it.
type countingWriter struct{ n int64 }

func (c *countingWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return len(p), nil
}

// BenchmarkWriter replays the samples of the real fixture (perf record -g
// of the Go compiler, testdata/cbf/gobuild.sprof) through a Writer, with a
// chunk a second of recorded time, and reports the cost and size of a
// sample and of a frame.
func BenchmarkWriter(b *testing.B) {
	data, err := os.ReadFile(fixture)
	if err != nil {
		b.Fatal(err)
	}
	_, samples, procs, _, err := readAll(b, data)
	if err != io.EOF {
		b.Fatal(err)
	}
	sortSamples(samples)
	var out countingWriter
	var cpu time.Duration
	var last bytes.Buffer
	for b.Loop() {
		out.n = 0
		last.Reset()
		meter := cputime.Start()
		clock := newFakeClock()
		w, err := NewWriter(io.MultiWriter(&out, &last), Options{Clock: clock.now})
		if err != nil {
			b.Fatal(err)
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
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
		cpu += meter.Stop()
	}
	frames := 0
	for _, s := range samples {
		frames += len(s.user) + len(s.kernel)
	}
	n := float64(b.N) * float64(len(samples))
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/sample")
	b.ReportMetric(float64(cpu.Nanoseconds())/n, "cpu-ns/sample")
	b.ReportMetric(float64(out.n)/float64(len(samples)), "bytes/sample")
	// Everything in the file (maps, times, names) per frame sampled, and
	// the stack table alone.
	b.ReportMetric(float64(out.n)/float64(frames), "bytes/frame")
	b.ReportMetric(float64(chunkBytes(b, last.Bytes(), ChunkStacks))/float64(frames), "stack-bytes/frame")
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
