package unwind

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"runtime"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sprof/sprof/sframe"
)

// Building unwind tables in the background.
//
// Building a table takes from a millisecond (a small program) to seconds
// (libLLVM's 129,000 FDEs and 1.2 million rows: 0.8 s on an idle core, 6 s
// and more on a loaded host). Built inside a profiler's drain, that stalls
// the drain: the sampler's ring overflows and every process loses
// samples. So the drain only asks for a table; one worker goroutine builds
// the tables asked for, one at a time, the one with the least CFI first,
// so that a huge library does not delay all the small ones behind it. Its
// thread runs at nice 10, below the programs being profiled. The drain
// takes finished tables at its next pass.
//
// One build at a time: the host may have two CPUs, and a profiler must
// stay cheap. With a Store (store.go), tables built once are read from
// it, on a second goroutine at the profiler's own priority, and only the
// binaries it has not go to the builds.

// buildNice is the nice value of the thread that builds tables.
const buildNice = 10

// BuildFunc builds the unwind table of the ELF file r (named name for
// errors), as BuildTable does.
type BuildFunc func(r io.ReaderAt, name string, hasSFrame bool) (t *sframe.Table, kind Method, sframeErr, err error)

// Job is one table to build: the inputs the caller hands over, the
// outputs the worker hands back. Key is the caller's, untouched.
type Job[K any] struct {
	Key       K
	File      *os.File // closed by the Builder
	Name      string
	HasSFrame bool
	Cost      int64 // bytes of CFI: cheaper jobs go first
	// BuildID is the binary's build ID: with a Store, its table is read
	// from there when stored, and stored once built. "" bypasses the
	// Store.
	BuildID string

	Table     *sframe.Table
	Kind      Method
	SFrameErr error // an error of .sframe that was worked around
	Err       error // no table
	Took      time.Duration
	// Stored says the table was read from the Store; StoreErr is why it
	// could not be read (a damaged file, rebuilt) or written.
	Stored   bool
	StoreErr error
}

// Builder runs Jobs on one worker goroutine, started when there is work
// and gone when there is none.
type Builder[K any] struct {
	build BuildFunc
	store *Store // nil: every table is built

	mu       sync.Mutex
	stored   []*Job[K] // waiting for the store to be read
	queue    []*Job[K] // waiting to be built
	done     []*Job[K] // finished, for Take
	reading  bool      // the reader goroutine runs
	building bool      // the build goroutine runs
	closed   bool
	// finished is signalled, without blocking, when a job is done.
	finished chan struct{}
	// workers are the reader and build goroutines, for Close to wait for.
	workers sync.WaitGroup
}

// NewBuilder returns a Builder building tables with build, and keeping
// them in store if not nil. With a store, a job's table is first looked
// for there, by another goroutine at the profiler's own priority: reading
// libLLVM's stored table takes about 0.1 s, and behind the builds at nice
// 10 on a busy host it would wait for seconds.
func NewBuilder[K any](build BuildFunc, store *Store) *Builder[K] {
	return &Builder[K]{build: build, store: store, finished: make(chan struct{}, 1)}
}

// Submit queues j; the Builder closes j.File.
func (b *Builder[K]) Submit(j *Job[K]) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		j.File.Close()
		return
	}
	if b.store != nil && j.BuildID != "" {
		b.stored = append(b.stored, j)
		if !b.reading {
			b.reading = true
			b.workers.Go(b.read)
		}
		return
	}
	b.queueBuild(j)
}

// queueBuild queues j for the build goroutine, starting it if needed;
// b.mu is held.
func (b *Builder[K]) queueBuild(j *Job[K]) {
	b.queue = append(b.queue, j)
	if !b.building {
		b.building = true
		b.workers.Go(b.work)
	}
}

// read takes the waiting jobs' tables from the store, in the order they
// came, and passes those it has not (or has damaged) to the builds.
func (b *Builder[K]) read() {
	for {
		b.mu.Lock()
		if b.closed || len(b.stored) == 0 {
			b.reading = false
			b.mu.Unlock()
			return
		}
		j := b.stored[0]
		b.stored = slices.Delete(b.stored, 0, 1)
		b.mu.Unlock()

		began := time.Now()
		t, kind, err := b.store.Load(j.BuildID, j.HasSFrame)
		j.Took = time.Since(began)
		if err == nil {
			j.Table, j.Kind, j.Stored = t, kind, true
			b.finish(j)
			continue
		}
		if !errors.Is(err, fs.ErrNotExist) {
			j.StoreErr = err
		}
		b.mu.Lock()
		if b.closed {
			j.File.Close()
		} else {
			b.queueBuild(j)
		}
		b.mu.Unlock()
	}
}

// work builds the queued tables, cheapest first, until none is left.
func (b *Builder[K]) work() {
	// The thread ends with the goroutine (it stays locked), so its nice
	// value never passes to other goroutines.
	runtime.LockOSThread()
	unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), buildNice)
	for {
		b.mu.Lock()
		if b.closed || len(b.queue) == 0 {
			b.building = false
			b.mu.Unlock()
			return
		}
		i := 0
		for k, j := range b.queue {
			if j.Cost < b.queue[i].Cost {
				i = k
			}
		}
		j := b.queue[i]
		b.queue = slices.Delete(b.queue, i, i+1)
		b.mu.Unlock()

		began := time.Now()
		j.Table, j.Kind, j.SFrameErr, j.Err = b.build(j.File, j.Name, j.HasSFrame)
		j.Took += time.Since(began)
		// A table built with an .sframe error worked around is not
		// stored: the error would not be reported again.
		if b.store != nil && j.BuildID != "" && j.Err == nil && j.SFrameErr == nil {
			if err := b.store.Save(j.BuildID, j.HasSFrame, j.Table, j.Kind); err != nil && j.StoreErr == nil {
				j.StoreErr = err
			}
		}
		b.finish(j)
	}
}

// finish hands j over to Take.
func (b *Builder[K]) finish(j *Job[K]) {
	j.File.Close()
	b.mu.Lock()
	b.done = append(b.done, j)
	b.mu.Unlock()
	select {
	case b.finished <- struct{}{}:
	default:
	}
}

// Take returns the jobs finished since the last call.
func (b *Builder[K]) Take() []*Job[K] {
	b.mu.Lock()
	defer b.mu.Unlock()
	d := b.done
	b.done = nil
	return d
}

// Finished is signalled, without blocking, when a job finishes: a drain
// loop that selects on it takes each table as it is done, not at its next
// period. Wait waits on the same channel, so one goroutine should use one
// or the other at a time.
func (b *Builder[K]) Finished() <-chan struct{} { return b.finished }

// Wait waits up to d for a job to finish, and reports whether one did; a
// closed Builder with nothing under way finishes nothing.
func (b *Builder[K]) Wait(d time.Duration) bool {
	b.mu.Lock()
	idle := b.closed && !b.reading && !b.building
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

// Close drops the queued jobs and waits for the read and the build under
// way, if any, to end: nothing of the Builder's outlives it (its file
// descriptors, its goroutines, a table half built).
func (b *Builder[K]) Close() {
	b.mu.Lock()
	b.closed = true
	for _, j := range append(b.stored, b.queue...) {
		j.File.Close()
	}
	b.stored, b.queue = nil, nil
	b.mu.Unlock()
	b.workers.Wait()
}
