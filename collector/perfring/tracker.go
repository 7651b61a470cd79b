package perfring

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sprof/sprof/internal/cpus"
)

// bitBuildID is perf_event_attr.build_id (bit 34 of the flag word, kernel
// 5.12): MMAP2 records carry the file's build ID. An older kernel refuses
// an event with it (EINVAL); its MMAP2 records carry the file's device
// and inode instead, and the build ID is read from the file.
const bitBuildID = 1 << 34

// DefaultPages is the default size of each CPU's ring in pages: 256 KiB
// with 4 KiB pages holds about 2,000 mmap records, the mappings of a few
// hundred process starts per CPU between two drains.
const DefaultPages = 64

// Tracker is a set of tracking events, one per online CPU, that report
// every process's executable mappings, execs, forks and exits system-wide.
type Tracker struct {
	// buildIDs: the events ask for build IDs (bitBuildID), until the
	// kernel refuses them.
	buildIDs bool
	fds      []int
	mems     [][]byte
	rings    []*Ring
	rec      Record
	lost     uint64
}

// Open opens a tracking event on every online CPU with a ring of pages
// pages each (a power of two; 0 means DefaultPages). It needs
// CAP_PERFMON (or root), or kernel.perf_event_paranoid ≤ -1.
func Open(pages int) (*Tracker, error) { return openTracker(pages, true) }

// openTracker is Open, asking for build IDs or not (as Open asks a
// kernel before 5.12, which refuses them).
func openTracker(pages int, buildIDs bool) (*Tracker, error) {
	if pages == 0 {
		pages = DefaultPages
	}
	if pages < 1 || pages&(pages-1) != 0 {
		return nil, fmt.Errorf("perf ring: %d pages is not a power of two", pages)
	}
	online, err := cpus.Online()
	if err != nil {
		return nil, err
	}
	t := &Tracker{buildIDs: buildIDs}
	for _, cpu := range online {
		if err := t.open(cpu, pages); err != nil {
			t.Close()
			return nil, err
		}
	}
	return t, nil
}

func (t *Tracker) open(cpu, pages int) error {
	pageSize := os.Getpagesize()
	attr := unix.PerfEventAttr{
		Type:        unix.PERF_TYPE_SOFTWARE,
		Config:      unix.PERF_COUNT_SW_DUMMY,
		Sample_type: unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_TIME,
		Bits: unix.PerfBitMmap | unix.PerfBitMmap2 | unix.PerfBitComm | unix.PerfBitCommExec |
			unix.PerfBitTask | unix.PerfBitSampleIDAll | unix.PerfBitUseClockID |
			unix.PerfBitWatermark,
		// Wake no one before the ring is full: the reader polls.
		Wakeup:  uint32(pages * pageSize),
		Clockid: unix.CLOCK_MONOTONIC,
	}
	if t.buildIDs {
		attr.Bits |= bitBuildID
	}
	attr.Size = uint32(unsafe.Sizeof(attr))
	fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if errors.Is(err, unix.EINVAL) && t.buildIDs {
		t.buildIDs = false // before Linux 5.12
		return t.open(cpu, pages)
	}
	if err != nil {
		if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
			return fmt.Errorf("open perf tracking event on CPU %d: %w (needs root or CAP_PERFMON)", cpu, err)
		}
		return fmt.Errorf("open perf tracking event on CPU %d: %w", cpu, err)
	}
	t.fds = append(t.fds, fd)
	mem, err := unix.Mmap(fd, 0, (pages+1)*pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mmap perf ring of CPU %d (%d pages): %w", cpu, pages, err)
	}
	t.mems = append(t.mems, mem)
	r, err := newRing(mem, pageSize)
	if err != nil {
		return err
	}
	t.rings = append(t.rings, r)
	return nil
}

// Read drains every CPU's ring and calls fn for each record; rec and the
// slices it holds are valid only during fn. LOST records are counted (see
// Lost) and also passed to fn. Records are in time order within one CPU,
// not across CPUs. A record that fails to parse is skipped; the first
// such error, with a count of the others, is returned once the rings are
// drained.
func (t *Tracker) Read(fn func(rec *Record)) (int, error) {
	var first error
	bad, total := 0, 0
	for _, r := range t.rings {
		n, err := r.Read(func(b []byte) {
			if err := Parse(b, &t.rec, t.buildIDs); err != nil {
				if bad++; first == nil {
					first = err
				}
				return
			}
			if t.rec.Type == RecordLost {
				t.lost += t.rec.Lost
			}
			fn(&t.rec)
		})
		total += n
		if err != nil {
			if bad++; first == nil {
				first = err
			}
		}
	}
	if bad > 1 {
		return total, fmt.Errorf("%w (and %d more errors)", first, bad-1)
	}
	return total, first
}

// Lost is the number of records the kernel dropped so far because a ring
// was full.
func (t *Tracker) Lost() uint64 { return t.lost }

// Close stops the events and unmaps their rings.
func (t *Tracker) Close() error {
	var errs []error
	for _, m := range t.mems {
		errs = append(errs, unix.Munmap(m))
	}
	for _, fd := range t.fds {
		errs = append(errs, unix.Close(fd))
	}
	t.fds, t.mems, t.rings = nil, nil, nil
	return errors.Join(errs...)
}
