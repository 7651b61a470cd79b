package unwind

import (
	"io"
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
// stay cheap.

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

	Table     *sframe.Table
	Kind      Method
	SFrameErr error // an error of .sframe that was worked around
	Err       error // no table
	Took      time.Duration
}

// Builder runs Jobs on one worker goroutine, started when there is work
// and gone when there is none.
type Builder[K any] struct {
	build BuildFunc

	mu      sync.Mutex
	queue   []*Job[K] // waiting
	done    []*Job[K] // finished, for Take
	running bool
	closed  bool
	// finished is signalled, without blocking, when a job is done.
	finished chan struct{}
	// workers is the worker goroutine, for Close to wait for.
	workers sync.WaitGroup
}

// NewBuilder returns a Builder building tables with build.
func NewBuilder[K any](build BuildFunc) *Builder[K] {
	return &Builder[K]{build: build, finished: make(chan struct{}, 1)}
}

// Submit queues j; the Builder closes j.File.
func (b *Builder[K]) Submit(j *Job[K]) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		j.File.Close()
		return
	}
	b.queue = append(b.queue, j)
	if !b.running {
		b.running = true
		b.workers.Go(b.work)
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
			b.running = false
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
		j.Took = time.Since(began)
		j.File.Close()

		b.mu.Lock()
		b.done = append(b.done, j)
		b.mu.Unlock()
		select {
		case b.finished <- struct{}{}:
		default:
		}
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

// Wait waits up to d for a job to finish, and reports whether one did; a
// closed Builder with nothing under way finishes nothing.
func (b *Builder[K]) Wait(d time.Duration) bool {
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

// Close drops the queued jobs and waits for the build under way, if any,
// to end: nothing of the Builder's outlives it (its file descriptors, its
// goroutine, a table half built).
func (b *Builder[K]) Close() {
	b.mu.Lock()
	b.closed = true
	for _, j := range b.queue {
		j.File.Close()
	}
	b.queue = nil
	b.mu.Unlock()
	b.workers.Wait()
}
