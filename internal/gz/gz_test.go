package gz

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
)

// payload is n bytes of a profile-like mix: runs of repeats and noise.
func payload(n int) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, n)
	for i := range b {
		if i%64 < 48 {
			b[i] = byte(i % 7)
		} else {
			b[i] = byte(r.IntN(256))
		}
	}
	return b
}

// TestSameBytesAsGzip: reused writers give the bytes a new gzip.Writer
// gives, call after call, and gunzip back to the payload.
func TestSameBytesAsGzip(t *testing.T) {
	var c Compressor
	for i, n := range []int{0, 1, 1000, 300_000, 5} {
		b := payload(n)
		var want bytes.Buffer
		zw := gzip.NewWriter(&want)
		zw.Write(b)
		zw.Close()
		got := c.Bytes(b)
		if !bytes.Equal(got, want.Bytes()) {
			t.Errorf("call %d, %d bytes: %d compressed bytes differ from gzip.NewWriter's %d", i, n, len(got), want.Len())
		}
		zr, err := gzip.NewReader(bytes.NewReader(got))
		if err != nil {
			t.Fatal(err)
		}
		if back, err := io.ReadAll(zr); err != nil || !bytes.Equal(back, b) {
			t.Errorf("call %d: gunzip gives %d bytes, %v; want the %d written", i, len(back), err, n)
		}
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// TestWriteError: a failing destination's error is returned, and the
// writer, reused, still compresses the next payload whole.
func TestWriteError(t *testing.T) {
	var c Compressor
	if err := c.Write(failingWriter{}, payload(100_000)); err == nil || err.Error() != "disk full" {
		t.Errorf("Write to a failing writer: %v", err)
	}
	b := payload(1000)
	zr, err := gzip.NewReader(bytes.NewReader(c.Bytes(b)))
	if err != nil {
		t.Fatal(err)
	}
	if back, err := io.ReadAll(zr); err != nil || !bytes.Equal(back, b) {
		t.Errorf("after a failed write: %d bytes, %v", len(back), err)
	}
}

// BenchmarkCompress compresses a 20 KB profile-like payload (an agent's
// typical per-service pprof) with a new gzip.Writer each time and with a
// Compressor's reused one: compare B/op.
func BenchmarkCompress(b *testing.B) {
	p := payload(20_000)
	b.Run("new", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(p)))
		for b.Loop() {
			zw := gzip.NewWriter(io.Discard)
			zw.Write(p)
			zw.Close()
		}
	})
	b.Run("reused", func(b *testing.B) {
		var c Compressor
		b.ReportAllocs()
		b.SetBytes(int64(len(p)))
		for b.Loop() {
			c.Write(io.Discard, p)
		}
	})
}
