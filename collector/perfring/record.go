package perfring

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// Type is a perf record type (PERF_RECORD_*).
type Type uint32

// The record types a tracking event produces.
const (
	RecordMmap     Type = unix.PERF_RECORD_MMAP
	RecordLost     Type = unix.PERF_RECORD_LOST
	RecordComm     Type = unix.PERF_RECORD_COMM
	RecordExit     Type = unix.PERF_RECORD_EXIT
	RecordThrottle Type = unix.PERF_RECORD_THROTTLE
	RecordFork     Type = unix.PERF_RECORD_FORK
	RecordMmap2    Type = unix.PERF_RECORD_MMAP2
)

func (t Type) String() string {
	switch t {
	case RecordMmap:
		return "PERF_RECORD_MMAP"
	case RecordLost:
		return "PERF_RECORD_LOST"
	case RecordComm:
		return "PERF_RECORD_COMM"
	case RecordExit:
		return "PERF_RECORD_EXIT"
	case RecordThrottle:
		return "PERF_RECORD_THROTTLE"
	case RecordFork:
		return "PERF_RECORD_FORK"
	case RecordMmap2:
		return "PERF_RECORD_MMAP2"
	}
	return fmt.Sprintf("PERF_RECORD(%d)", uint32(t))
}

// Misc flags of perf_event_header.misc.
const (
	// MiscCommExec marks a COMM record written by exec.
	MiscCommExec = unix.PERF_RECORD_MISC_COMM_EXEC
	// MiscMmapBuildID marks an MMAP2 record carrying a build ID instead
	// of the device and inode numbers.
	MiscMmapBuildID = 1 << 14
)

// sampleIDSize is the size of the sample_id trailer every non-sample record
// carries with sample_id_all and sample_type PERF_SAMPLE_TID|PERF_SAMPLE_TIME:
// u32 pid, tid; u64 time.
const sampleIDSize = 16

// FormatError is a record whose contents do not fit its type.
type FormatError struct {
	Type   Type
	Offset int // byte offset of Field inside the record
	Field  string
	Msg    string
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("%v: %s at offset %d: %s", e.Type, e.Field, e.Offset, e.Msg)
}

// Record is one decoded side-band record. Which fields are set depends on
// Type; the byte slices point into the ring and are valid only during the
// callback that received the Record.
type Record struct {
	Type Type
	Misc uint16
	// Pid and Tid are the process and thread the record is about; Time is
	// its CLOCK_MONOTONIC time in nanoseconds.
	Pid, Tid uint32
	Time     uint64

	// MMAP2: an executable mapping of [Addr, Addr+Len) from file offset
	// Pgoff of Filename. BuildID is set when the kernel could read it;
	// otherwise Maj, Min, Ino and InoGeneration identify the file (and
	// both are empty on records that carry a build ID).
	Addr, Len, Pgoff   uint64
	BuildID            []byte
	Maj, Min           uint32
	Ino, InoGeneration uint64
	Prot, Flags        uint32
	Filename           []byte

	// COMM: the new name, after exec when Misc has MiscCommExec.
	Comm []byte

	// FORK and EXIT: the parent (for FORK) or the reaper's view.
	PPid, PTid uint32

	// LOST: records the kernel dropped because the ring was full.
	Lost uint64
}

// IsExec reports whether a COMM record was written by exec.
func (r *Record) IsExec() bool { return r.Type == RecordComm && r.Misc&MiscCommExec != 0 }

// Parse decodes rec, a whole record from a tracking event's ring, into r.
// Record types a tracking event does not describe are returned with only
// Type, Misc, Pid, Tid and Time set. buildIDs says whether the event asked
// for build IDs (perf_event_attr.build_id): where it did not, an MMAP2
// record's MiscMmapBuildID is the kernel's mistake and is cleared, and
// the record's file identity is read as the device and inode it is.
// Linux (5.12 to 6.18 at least) builds a mapping's record once for every
// event that tracks it, sets the bit in that shared header for an event
// that asked, and does not clear it for the events after: another
// tracker with build IDs on the host, opened after this one, leaks it
// into this one's records (TestTrackerBesideBuildIDs).
func Parse(rec []byte, r *Record, buildIDs bool) error {
	*r = Record{}
	ne := binary.NativeEndian
	if len(rec) < headerSize {
		return &FormatError{Offset: 0, Field: "perf_event_header", Msg: fmt.Sprintf("record of %d bytes", len(rec))}
	}
	r.Type, r.Misc = Type(ne.Uint32(rec)), ne.Uint16(rec[4:])
	if int(ne.Uint16(rec[6:])) != len(rec) {
		return &FormatError{r.Type, 6, "header.size", fmt.Sprintf("%d for a record of %d bytes", ne.Uint16(rec[6:]), len(rec))}
	}
	if len(rec) < headerSize+sampleIDSize {
		return &FormatError{r.Type, headerSize, "sample_id", "record too short for its sample_id trailer"}
	}
	id := rec[len(rec)-sampleIDSize:]
	r.Pid, r.Tid, r.Time = ne.Uint32(id), ne.Uint32(id[4:]), ne.Uint64(id[8:])
	body := rec[headerSize : len(rec)-sampleIDSize]
	need := func(n int, field string) error {
		if len(body) < n {
			return &FormatError{r.Type, headerSize + len(body), field, fmt.Sprintf("body of %d bytes, need %d", len(body), n)}
		}
		return nil
	}
	switch r.Type {
	case RecordMmap2:
		// u32 pid, tid; u64 addr, len, pgoff; 24-byte file identity;
		// u32 prot, flags; char filename[].
		const nameOff = 8 + 24 + 24 + 8
		if err := need(nameOff, "filename"); err != nil {
			return err
		}
		r.Pid, r.Tid = ne.Uint32(body), ne.Uint32(body[4:])
		r.Addr, r.Len, r.Pgoff = ne.Uint64(body[8:]), ne.Uint64(body[16:]), ne.Uint64(body[24:])
		ident := body[32:56]
		if !buildIDs {
			r.Misc &^= MiscMmapBuildID
		}
		if r.Misc&MiscMmapBuildID != 0 {
			n := int(ident[0])
			if n > 20 {
				return &FormatError{r.Type, headerSize + 32, "build_id_size", fmt.Sprintf("%d exceeds 20", n)}
			}
			r.BuildID = ident[4 : 4+n]
		} else {
			r.Maj, r.Min = ne.Uint32(ident), ne.Uint32(ident[4:])
			r.Ino, r.InoGeneration = ne.Uint64(ident[8:]), ne.Uint64(ident[16:])
		}
		r.Prot, r.Flags = ne.Uint32(body[56:]), ne.Uint32(body[60:])
		r.Filename = cstring(body[nameOff:])
	case RecordMmap:
		// u32 pid, tid; u64 addr, len, pgoff; char filename[].
		if err := need(32, "filename"); err != nil {
			return err
		}
		r.Pid, r.Tid = ne.Uint32(body), ne.Uint32(body[4:])
		r.Addr, r.Len, r.Pgoff = ne.Uint64(body[8:]), ne.Uint64(body[16:]), ne.Uint64(body[24:])
		r.Filename = cstring(body[32:])
	case RecordComm:
		if err := need(8, "comm"); err != nil {
			return err
		}
		r.Pid, r.Tid = ne.Uint32(body), ne.Uint32(body[4:])
		r.Comm = cstring(body[8:])
	case RecordFork, RecordExit:
		// u32 pid, ppid, tid, ptid; u64 time.
		if err := need(24, "time"); err != nil {
			return err
		}
		r.Pid, r.PPid, r.Tid, r.PTid = ne.Uint32(body), ne.Uint32(body[4:]), ne.Uint32(body[8:]), ne.Uint32(body[12:])
	case RecordLost:
		// u64 id, lost.
		if err := need(16, "lost"); err != nil {
			return err
		}
		r.Lost = ne.Uint64(body[8:])
	}
	return nil
}

// cstring returns b up to its first NUL.
func cstring(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}
