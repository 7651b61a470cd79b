package collector

import (
	"debug/elf"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sprof/sprof/sframe"
	"github.com/sprof/sprof/sframe/synth"
)

// Building unwind tables in the background.
//
// Building a table takes from a millisecond (a small program) to seconds
// (libLLVM's 129,000 FDEs and 1.2 million rows: 0.8 s on an idle core, 6 s
// and more on a loaded host). Built inside the drain, that stalls the
// drain: the sampler's ring overflows and every process loses samples. So
// the drain only asks for a table; one worker goroutine builds the tables
// asked for, one at a time, the one with the least CFI first, so that a
// huge library does not delay all the small ones behind it. Its thread
// runs at nice 10, below the programs being profiled. The drain installs
// finished tables at its next pass, and the samples that needed them
// meanwhile are held back (unwind_hold.go).
//
// Bounds: one build at a time (the host may have two CPUs, and sprof must
// stay cheap); a table is built only from at most maxBuildInput bytes of
// CFI (.eh_frame, .debug_frame and .sframe, by their section headers),
// which bounds a build's transient memory: about 16 times the CFI at the
// peak (libLLVM 22: 6.2 MiB of .eh_frame, 100 MiB of heap at the peak for
// a table of 14.6 MiB), so at most about 256 MiB; and a table larger than
// the cache budget (Options.UnwindCacheBytes) is not kept. A binary over
// either bound has no table, and --debug-unwind names the reason.

// maxBuildInput bounds the CFI a table is built from: more than twice
// libLLVM's.
const maxBuildInput = 16 << 20

// buildNice is the nice value of the thread that builds tables.
const buildNice = 10

// buildFunc builds the unwind table of the ELF file r (named name for
// errors): from .sframe if hasSFrame, with the gaps filled from
// .eh_frame, else from .eh_frame and .debug_frame. It returns the table,
// the method its rules count as, an error of the .sframe section that was
// worked around (counted), and an error if there is no table.
type buildFunc func(r io.ReaderAt, name string, hasSFrame bool) (t *sframe.Table, kind Method, sframeErr, err error)

// buildJob is one table to build: the inputs the drain hands over, the
// outputs the worker hands back. Only the drain touches info.
type buildJob struct {
	info      *unwindInfo
	file      *os.File
	name      string
	hasSFrame bool
	cost      int64 // bytes of CFI

	table     *sframe.Table
	kind      Method
	sframeErr error
	err       error
	took      time.Duration
}

// tableBuilder runs buildJobs on one worker goroutine, started when there
// is work and gone when there is none.
type tableBuilder struct {
	build buildFunc

	mu      sync.Mutex
	queue   []*buildJob // waiting
	done    []*buildJob // finished, for the drain to take
	running bool
	closed  bool
	// finished is signalled, without blocking, when a job is done.
	finished chan struct{}
}

func newTableBuilder(build buildFunc) *tableBuilder {
	return &tableBuilder{build: build, finished: make(chan struct{}, 1)}
}

// submit queues j; the builder closes j.file.
func (b *tableBuilder) submit(j *buildJob) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		j.file.Close()
		return
	}
	b.queue = append(b.queue, j)
	if !b.running {
		b.running = true
		go b.work()
	}
}

// work builds the queued tables, cheapest first, until none is left.
func (b *tableBuilder) work() {
	// The thread ends with the goroutine (it stays locked), so its nice
	// value never passes to other goroutines.
	runtime.LockOSThread()
	unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), buildNice)
	for {
		b.mu.Lock()
		if b.closed || len(b.queue) == 0 {
			b.running = false
			b.mu.Unlock()
			return
		}
		i := 0
		for k, j := range b.queue {
			if j.cost < b.queue[i].cost {
				i = k
			}
		}
		j := b.queue[i]
		b.queue = slices.Delete(b.queue, i, i+1)
		b.mu.Unlock()

		began := time.Now()
		j.table, j.kind, j.sframeErr, j.err = b.build(j.file, j.name, j.hasSFrame)
		j.took = time.Since(began)
		j.file.Close()

		b.mu.Lock()
		b.done = append(b.done, j)
		b.mu.Unlock()
		select {
		case b.finished <- struct{}{}:
		default:
		}
	}
}

// take returns the jobs finished since the last call.
func (b *tableBuilder) take() []*buildJob {
	b.mu.Lock()
	defer b.mu.Unlock()
	d := b.done
	b.done = nil
	return d
}

// wait waits up to d for a job to finish, and reports whether one did;
// a closed builder with nothing under way finishes nothing.
func (b *tableBuilder) wait(d time.Duration) bool {
	b.mu.Lock()
	idle := b.closed && !b.running
	b.mu.Unlock()
	if idle {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-b.finished:
		return true
	case <-t.C:
		return false
	}
}

// close drops the queued jobs; a build under way ends on its own.
func (b *tableBuilder) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for _, j := range b.queue {
		j.file.Close()
	}
	b.queue = nil
}

// requestBuild asks for in's table, built from the file pid maps at m.
func (u *unwinder) requestBuild(in *unwindInfo, pid uint32, m *mapping) {
	if in.cfiBytes > maxBuildInput {
		u.noTable(in, fmt.Errorf("%s: %d MiB of CFI, more than the %d MiB a table is built from", in.name, in.cfiBytes>>20, maxBuildInput>>20))
		return
	}
	f := u.openFile(pid, m)
	if f == nil {
		u.noTable(in, fmt.Errorf("%s: cannot open", m.bin.name))
		return
	}
	in.building = true
	u.builds.submit(&buildJob{info: in, file: f, name: m.bin.name, hasSFrame: in.hasSFrame, cost: in.cfiBytes})
}

// openFile opens a descriptor of m's file for the builder: the file as
// pid maps it, else a copy of the descriptor pinned for symbolization
// (the process may be gone).
func (u *unwinder) openFile(pid uint32, m *mapping) *os.File {
	if f := u.files.open(pid, m); f != nil {
		return f
	}
	if p := m.bin.pinned; p != nil {
		if fd, err := unix.FcntlInt(p.Fd(), unix.F_DUPFD_CLOEXEC, 0); err == nil {
			return os.NewFile(uintptr(fd), m.bin.name)
		}
	}
	return nil
}

// noTable records that in has no table, and why.
func (u *unwinder) noTable(in *unwindInfo, err error) {
	in.built, in.err = true, err
	u.stats.TableErrors++
}

// install takes the tables the builder finished into the cache.
func (u *unwinder) install() {
	for _, j := range u.builds.take() {
		in := j.info
		in.building = false
		u.stats.BuildTime += j.took
		if j.sframeErr != nil {
			u.stats.TableErrors++
		}
		if j.err != nil {
			u.noTable(in, j.err)
			continue
		}
		size := j.table.MemSize()
		if size > u.budget {
			u.noTable(in, fmt.Errorf("%s: a table of %d MiB, more than the unwind cache's %d MiB", in.name, size>>20, u.budget>>20))
			continue
		}
		in.built, in.table, in.kind, in.size = true, j.table, j.kind, size
		u.stats.Tables++
		u.stats.TableBytes += size
		u.evict(in)
	}
}

// buildTable is the buildFunc of a Collector.
func buildTable(r io.ReaderAt, name string, hasSFrame bool) (t *sframe.Table, kind Method, sframeErr, err error) {
	err = readELF(r, name, func(f *elf.File) error {
		var sf *sframe.Table
		if hasSFrame {
			sf, sframeErr = sframe.FromELF(f)
		}
		eh, _, err := synth.FromELF(f)
		switch {
		case sf != nil && err == nil:
			t, kind = fillGaps(sf, eh), MethodSFrame
		case sf != nil:
			t, kind = sf, MethodSFrame
		case err != nil:
			return err
		default:
			t, kind = eh, MethodEHFrame
		}
		return nil
	})
	return t, kind, sframeErr, err
}
