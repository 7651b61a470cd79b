package agent

import (
	"context"
	"sync"
	"time"

	"github.com/sprof/sprof/exporters/pyroscope"
)

// batch is one interval's profiles still to deliver, one per series.
type batch struct {
	// start is the interval's start, which names its files when it has to
	// be written out instead.
	start time.Time
	items []pyroscope.Series
	// refused are the profiles the destination refused for good: the
	// interval is not delivered whole, and they are written out with
	// whatever else of it is never delivered.
	refused []pyroscope.Series
}

// queue holds the intervals waiting for one destination, at most capacity
// of them: when a new interval finds it full, the oldest is pushed out,
// since recent profiles are worth more and old ones soon pass the server's
// age limit. One goroutine takes from it.
type queue struct {
	mu       sync.Mutex
	batches  []*batch
	capacity int
	closed   bool
	ready    chan struct{} // signalled when a batch arrives or the queue closes
}

func newQueue(capacity int) *queue {
	return &queue{capacity: capacity, ready: make(chan struct{}, 1)}
}

// add appends b and returns the oldest batches it pushed out.
func (q *queue) add(b *batch) []*batch {
	q.mu.Lock()
	q.batches = append(q.batches, b)
	out := q.trim()
	q.mu.Unlock()
	q.signal()
	return out
}

// putBack returns a batch that could not be sent to the front, where it
// is the oldest and the first pushed out if newer intervals need the
// room; it returns the batches pushed out.
func (q *queue) putBack(b *batch) []*batch {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.batches = append([]*batch{b}, q.batches...)
	return q.trim()
}

func (q *queue) trim() []*batch {
	var out []*batch
	if n := len(q.batches) - q.capacity; n > 0 {
		out = append(out, q.batches[:n]...)
		q.batches = append(q.batches[:0:0], q.batches[n:]...)
	}
	return out
}

func (q *queue) signal() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// take removes and returns the oldest batch, waiting for one; nil when
// ctx is done, or when the queue is closed and empty.
func (q *queue) take(ctx context.Context) *batch {
	for {
		q.mu.Lock()
		if len(q.batches) > 0 {
			b := q.batches[0]
			q.batches[0] = nil
			q.batches = q.batches[1:]
			q.mu.Unlock()
			return b
		}
		closed := q.closed
		q.mu.Unlock()
		if closed {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-q.ready:
		}
	}
}

// len is how many intervals wait.
func (q *queue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.batches)
}

// close says no batch will be added any more: take returns nil once the
// queue is empty.
func (q *queue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.signal()
}

// takeAll removes and returns what is left, oldest first.
func (q *queue) takeAll() []*batch {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.batches
	q.batches = nil
	return out
}
