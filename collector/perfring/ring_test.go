package perfring

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"testing"
	"unsafe"
)

const testPage = 4096

// fakeRing is a ring in ordinary memory, written the way the kernel writes
// one, so wrap-around and corruption can be tested without a kernel.
type fakeRing struct {
	*Ring
	head uint64
}

func newFakeRing(t testing.TB, dataSize int) *fakeRing {
	words := make([]uint64, (testPage+dataSize)/8)
	mem := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)
	r, err := newRing(mem, testPage)
	if err != nil {
		t.Fatal(err)
	}
	return &fakeRing{Ring: r}
}

// write appends rec at the head, wrapping around the end, and publishes it.
func (f *fakeRing) write(rec []byte) {
	size := uint64(len(f.data))
	for i, b := range rec {
		f.data[(f.head+uint64(i))&(size-1)] = b
	}
	f.head += uint64(len(rec))
	f.meta.Data_head = f.head
}

// mmap2 builds an MMAP2 record as the kernel writes it with sample_id_all.
func mmap2(pid uint32, addr, length, pgoff uint64, buildID []byte, name string, time uint64) []byte {
	ne := binary.NativeEndian
	var b bytes.Buffer
	nameLen := (len(name) + 1 + 7) &^ 7
	size := headerSize + 64 + nameLen + sampleIDSize
	misc := uint16(0)
	if buildID != nil {
		misc = MiscMmapBuildID
	}
	b.Write(ne.AppendUint32(nil, uint32(RecordMmap2)))
	b.Write(ne.AppendUint16(nil, misc))
	b.Write(ne.AppendUint16(nil, uint16(size)))
	b.Write(ne.AppendUint32(nil, pid))
	b.Write(ne.AppendUint32(nil, pid))
	b.Write(ne.AppendUint64(nil, addr))
	b.Write(ne.AppendUint64(nil, length))
	b.Write(ne.AppendUint64(nil, pgoff))
	ident := make([]byte, 24)
	ident[0] = byte(len(buildID))
	copy(ident[4:], buildID)
	b.Write(ident)
	b.Write(ne.AppendUint32(nil, 5)) // PROT_READ|PROT_EXEC
	b.Write(ne.AppendUint32(nil, 2)) // MAP_PRIVATE
	b.WriteString(name)
	b.Write(make([]byte, nameLen-len(name)))
	b.Write(ne.AppendUint32(nil, pid))
	b.Write(ne.AppendUint32(nil, pid))
	b.Write(ne.AppendUint64(nil, time))
	return b.Bytes()
}

// An MMAP2 record flagged as carrying a build ID is read as one only by
// an event that asked for build IDs: for another, the flag is the
// kernel's mistake (see Parse), and the identity is the device and inode.
func TestParseBuildIDFlag(t *testing.T) {
	rec := mmap2(7, 0x1000, 0x2000, 0, bytes.Repeat([]byte{0xab}, 20), "/bin/one", 1)
	var r Record
	if err := Parse(rec, &r, true); err != nil || len(r.BuildID) != 20 || r.Misc&MiscMmapBuildID == 0 {
		t.Fatalf("asked: build ID %x, misc %#x, %v; want 20 bytes of 0xab, flagged", r.BuildID, r.Misc, err)
	}
	if err := Parse(rec, &r, false); err != nil || r.BuildID != nil || r.Misc&MiscMmapBuildID != 0 ||
		r.Maj != 20 || r.Min != 0xabababab || string(r.Filename) != "/bin/one" {
		t.Fatalf("not asked: build ID %x, misc %#x, device %d:%#x, file %q, %v; want no build ID, unflagged, 20:0xabababab",
			r.BuildID, r.Misc, r.Maj, r.Min, r.Filename, err)
	}
}

func TestRingWrapAround(t *testing.T) {
	f := newFakeRing(t, 256)
	id := bytes.Repeat([]byte{0xab}, 20)
	var got []string
	read := func() {
		t.Helper()
		if _, err := f.Read(func(b []byte) {
			var r Record
			if err := Parse(b, &r, true); err != nil {
				t.Fatal(err)
			}
			got = append(got, string(r.Filename))
		}); err != nil {
			t.Fatal(err)
		}
	}
	// Each record is 120 bytes; the third starts at 240 and wraps.
	names := []string{"/bin/one", "/bin/two", "/bin/three", "/bin/four", "/bin/five"}
	for i, name := range names {
		f.write(mmap2(7, 0x1000, 0x2000, 0, id, name, uint64(i)))
		if i%2 == 1 {
			read()
		}
	}
	read()
	if want := names; !slices.Equal(got, want) {
		t.Fatalf("read %q, want %q", got, want)
	}
	if f.meta.Data_tail != f.head {
		t.Fatalf("data_tail = %d, want %d", f.meta.Data_tail, f.head)
	}
}

func TestRingCorruptSize(t *testing.T) {
	for _, size := range []uint16{0, 4, 12, 4096} {
		f := newFakeRing(t, 256)
		rec := mmap2(7, 0x1000, 0x2000, 0, nil, "/bin/x", 1)
		binary.NativeEndian.PutUint16(rec[6:], size)
		f.write(rec)
		n, err := f.Read(func([]byte) { t.Fatal("called for a corrupt record") })
		var ce *CorruptError
		if n != 0 || !errors.As(err, &ce) || ce.Size != size {
			t.Fatalf("size %d: Read = %d, %v; want a CorruptError", size, n, err)
		}
		if f.meta.Data_tail != f.head {
			t.Fatalf("size %d: did not resynchronise: tail %d, head %d", size, f.meta.Data_tail, f.head)
		}
	}
}

// A head more than the data area past the tail, or a head or tail not
// 8-byte aligned (a header could then straddle the end: FuzzRing's
// corpus), is skipped whole and said.
func TestRingBadHead(t *testing.T) {
	for _, tt := range []struct{ head, tail uint64 }{{1 << 20, 0}, {268, 249}, {12, 0}, {0, 8}} {
		f := newFakeRing(t, 256)
		f.meta.Data_head, f.meta.Data_tail = tt.head, tt.tail
		_, err := f.Read(func([]byte) { t.Fatal("called") })
		var ce *CorruptError
		if !errors.As(err, &ce) || !ce.BadHead || ce.Head != tt.head || ce.Offset != tt.tail || f.meta.Data_tail != tt.head {
			t.Errorf("head %d, tail %d: %v, tail %d after; want the head said bad and the tail at it", tt.head, tt.tail, err, f.meta.Data_tail)
		}
	}
}

// BenchmarkDrain measures draining and parsing MMAP2 records, the largest
// and most frequent side-band record, from a ring where a quarter of them
// wrap around the end.
func BenchmarkDrain(b *testing.B) {
	const perDrain = 1000
	f := newFakeRing(b, 1<<18)
	rec := mmap2(7, 0x7f0000001000, 0x2000, 0x1000, bytes.Repeat([]byte{1}, 20), "/usr/lib/x86_64-linux-gnu/libc.so.6", 1)
	// Start near the end so that one record wraps around; the ring is
	// then re-read from the same tail each time.
	start := uint64(1<<18 - 7*len(rec))
	f.head = start
	for range perDrain {
		f.write(rec)
	}
	var r Record
	var sum uint64
	b.ResetTimer()
	for range b.N {
		f.meta.Data_tail = start
		f.Read(func(rec []byte) {
			Parse(rec, &r, true)
			sum += r.Addr
		})
	}
	ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N*perDrain)
	b.ReportMetric(ns, "ns/record")
	b.ReportMetric(1e9/ns, "records/s")
}
