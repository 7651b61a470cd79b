package convert

import (
	"bytes"
	"compress/zlib"
	"debug/elf"
	"io"
	"math/rand/v2"
	"path/filepath"
	"testing"
)

// zlibOracle is compress/zlib's answer: the decompressed bytes, or an
// error.
func zlibOracle(src []byte, size int) ([]byte, error) {
	zr, err := zlib.NewReader(bytes.NewReader(src))
	if err != nil {
		return nil, err
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(zr, b); err != nil {
		return nil, err
	}
	return b, nil
}

func compress(t testing.TB, data []byte, level int) []byte {
	var buf bytes.Buffer
	zw, err := zlib.NewWriterLevel(&buf, level)
	if err != nil {
		t.Fatal(err)
	}
	zw.Write(data)
	zw.Close()
	return buf.Bytes()
}

// inflateInputs are texts with the shapes compressors meet: DWARF, random
// bytes (stored blocks), long runs (overlapping matches), and the empty
// text.
func inflateInputs(t testing.TB) [][]byte {
	f, err := elf.Open(filepath.Join(fixtures, "gofix"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	info, err := f.Section(".debug_info").Data()
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, 100<<10)
	for i := range random {
		random[i] = byte(r.Uint32())
	}
	runs := bytes.Repeat([]byte("abcabcabcabcab"), 10000)
	runs = append(runs, bytes.Repeat([]byte{0}, 70000)...)
	return [][]byte{info, random, runs, nil, []byte("x")}
}

// TestZlibInflate: the decoder agrees with compress/zlib on streams of
// every compression level, and rejects what it should.
func TestZlibInflate(t *testing.T) {
	for i, data := range inflateInputs(t) {
		for _, level := range []int{zlib.NoCompression, zlib.BestSpeed, zlib.DefaultCompression, zlib.BestCompression, zlib.HuffmanOnly} {
			src := compress(t, data, level)
			dst := make([]byte, len(data))
			if err := zlibInflate(dst, src); err != nil {
				t.Fatalf("input %d level %d: %v", i, level, err)
			}
			if !bytes.Equal(dst, data) {
				t.Fatalf("input %d level %d: output differs", i, level)
			}
			if len(data) > 0 {
				if err := zlibInflate(dst[:len(dst)-1], src); err == nil {
					t.Errorf("input %d level %d: no error for a short destination", i, level)
				}
				if err := zlibInflate(dst, src[:len(src)-5]); err == nil {
					t.Errorf("input %d level %d: no error for a truncated stream", i, level)
				}
				bad := bytes.Clone(src)
				bad[len(bad)-1] ^= 1
				if err := zlibInflate(dst, bad); err == nil {
					t.Errorf("input %d level %d: no error for a bad checksum", i, level)
				}
			}
		}
	}
}

// FuzzZlibInflate compares the decoder with compress/zlib on arbitrary
// streams (and on the fuzzer's mutations of real ones): where zlib
// succeeds, both must give the same bytes; the decoder must never panic.
func FuzzZlibInflate(f *testing.F) {
	for _, data := range inflateInputs(f) {
		// Small seeds: the fuzzer minimizes every new input it keeps.
		if len(data) > 1024 {
			data = data[:1024]
		}
		for _, level := range []int{zlib.NoCompression, zlib.BestSpeed, zlib.BestCompression} {
			f.Add(compress(f, data, level), uint16(len(data)))
		}
	}
	f.Fuzz(func(t *testing.T, src []byte, size uint16) {
		dst := make([]byte, size)
		err := zlibInflate(dst, src)
		want, werr := zlibOracle(src, int(size))
		if werr == nil && err == nil && !bytes.Equal(dst, want) {
			t.Fatalf("output differs from compress/zlib")
		}
	})
}

// BenchmarkZlibInflate inflates the Go fixture's .debug_info, reporting
// MB/s of output, next to compress/zlib.
func BenchmarkZlibInflate(b *testing.B) {
	data := inflateInputs(b)[0]
	src := compress(b, data, zlib.DefaultCompression)
	dst := make([]byte, len(data))
	b.Run("sprof", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for i := 0; i < b.N; i++ {
			if err := zlibInflate(dst, src); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("compress-zlib", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for i := 0; i < b.N; i++ {
			if _, err := zlibOracle(src, len(data)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
