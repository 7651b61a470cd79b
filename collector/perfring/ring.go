package perfring

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// headerSize is the size of struct perf_event_header.
const headerSize = 8

// Ring is the memory-mapped ring buffer of one perf event: a metadata page
// followed by a power-of-two data area.
type Ring struct {
	meta *unix.PerfEventMmapPage
	data []byte
	// wrapped holds a record that runs past the end of the data area,
	// copied into one piece. Record sizes are 16-bit, so it never grows
	// beyond 64 KiB.
	wrapped []byte
}

// CorruptError reports a record header, or a head, that cannot be right:
// the reader skipped everything up to the kernel's head to resynchronise.
type CorruptError struct {
	// Offset is the position of the bad header in the ring's stream.
	Offset uint64
	// BadHead: the kernel's head, Head, is what cannot be right (more
	// than the data area past the tail, or either not 8-byte aligned).
	// Otherwise the header at Offset is, with its size Size.
	BadHead bool
	Head    uint64
	Size    uint16
	Skipped uint64
}

func (e *CorruptError) Error() string {
	if e.BadHead {
		return fmt.Sprintf("perf ring: head at stream offset %#x cannot follow tail %#x; skipped %d bytes", e.Head, e.Offset, e.Skipped)
	}
	return fmt.Sprintf("perf ring: record header at stream offset %#x: size %d is impossible; skipped %d bytes", e.Offset, e.Size, e.Skipped)
}

// newRing wraps mem, laid out as the kernel lays out a perf mmap: a
// metadata page of pageSize bytes and a data area whose size is a power of
// two. mem must be 8-byte aligned.
func newRing(mem []byte, pageSize int) (*Ring, error) {
	size := len(mem) - pageSize
	if pageSize < int(unsafe.Sizeof(unix.PerfEventMmapPage{})) || size < headerSize || size&(size-1) != 0 {
		return nil, fmt.Errorf("perf ring: %d bytes is not a %d-byte metadata page plus a power-of-two data area", len(mem), pageSize)
	}
	return &Ring{
		meta: (*unix.PerfEventMmapPage)(unsafe.Pointer(&mem[0])),
		data: mem[pageSize:],
	}, nil
}

// Read calls fn for each record the kernel has written since the last Read,
// then hands the space back to the kernel. rec is the whole record,
// header included; it is valid only during fn. Read returns the number of
// records and, when a header was corrupt, a *CorruptError after skipping
// what remained.
func (r *Ring) Read(fn func(rec []byte)) (int, error) {
	// The load of data_head must happen before the records are read;
	// Go's atomics are sequentially consistent, which includes acquire.
	head := atomic.LoadUint64(&r.meta.Data_head)
	tail := r.meta.Data_tail
	size := uint64(len(r.data))
	n := 0
	var err error
	// The kernel writes whole records of multiples of 8 bytes, so both
	// ends stay 8-byte aligned and a header never straddles the end.
	if head-tail > size || (head|tail)%8 != 0 {
		err = &CorruptError{Offset: tail, BadHead: true, Head: head, Skipped: head - tail}
		tail = head
	}
	for tail < head {
		off := tail & (size - 1)
		recSize := binary.NativeEndian.Uint16(r.data[off+6:])
		if recSize < headerSize || recSize%8 != 0 || uint64(recSize) > head-tail {
			err = &CorruptError{Offset: tail, Size: recSize, Skipped: head - tail}
			tail = head
			break
		}
		end := off + uint64(recSize)
		if end <= size {
			fn(r.data[off:end])
		} else {
			r.wrapped = append(append(r.wrapped[:0], r.data[off:]...), r.data[:end-size]...)
			fn(r.wrapped)
		}
		tail += uint64(recSize)
		n++
	}
	// Storing data_tail releases the space: it must follow our reads.
	atomic.StoreUint64(&r.meta.Data_tail, tail)
	return n, err
}
