package readall

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestAppend(t *testing.T) {
	want := strings.Repeat("0123456789", 100_000)
	// One byte per Read: the buffer grows many times, and what it holds
	// is the whole input, after what dst held.
	got, err := Append([]byte("x"), iotest.OneByteReader(strings.NewReader(want)), len(want))
	if err != nil || string(got) != "x"+want {
		t.Fatalf("Append: %d bytes, %v; want %d bytes", len(got), err, len(want)+1)
	}
	if _, err := Append(nil, strings.NewReader(want), len(want)-1); err == nil {
		t.Error("no error past the limit")
	}
	if _, err := Append(nil, iotest.ErrReader(io.ErrUnexpectedEOF), 10); err != io.ErrUnexpectedEOF {
		t.Errorf("error %v, want the reader's", err)
	}
	buf := make([]byte, 0, len(want)+1) // room to read the end
	if got, _ := Append(buf, strings.NewReader(want), len(want)); &got[0] != &buf[:1][0] {
		t.Error("a buffer large enough was not used")
	}
}

// BenchmarkAppend reads 5.5 MB, /proc/kallsyms's size, from an empty
// buffer: B/op against the 5.5 MB kept.
func BenchmarkAppend(b *testing.B) {
	data := bytes.Repeat([]byte("ffffffff81000000 T startup_64\n"), 180_000)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Append(nil, bytes.NewReader(data), len(data)); err != nil {
			b.Fatal(err)
		}
	}
}
