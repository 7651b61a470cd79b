package agent

import (
	"context"
	"sync"

	"github.com/sprof/sprof/exporters/pyroscope"
)

// batch is one interval's profiles still to push, one per series.
type batch struct {
	items []pyroscope.Series
}

// queue holds the intervals waiting for the server, at most capacity of
// them: when a new interval finds it full, the oldest is dropped, since
// recent profiles are worth more and old ones soon pass the server's age
// limit. One goroutine takes from it.
type queue struct {
	mu       sync.Mutex
	batches  []*batch
	capacity int
	closed   bool
	ready    chan struct{} // signalled when a batch arrives or the queue closes
	m        *metrics
}

func newQueue(capacity int, m *metrics) *queue {
	m.queueCapacity.Store(int64(capacity))
	return &queue{capacity: capacity, ready: make(chan struct{}, 1), m: m}
}

// add appends b, dropping the oldest batches past the capacity.
func (q *queue) add(b *batch) {
	q.mu.Lock()
	q.batches = append(q.batches, b)
	q.trim()
	q.mu.Unlock()
	q.signal()
}

// putBack returns a batch that could not be sent to the front, where it
// is the oldest and the first dropped if newer intervals need the room.
func (q *queue) putBack(b *batch) {
	q.mu.Lock()
	q.batches = append([]*batch{b}, q.batches...)
	q.trim()
	q.mu.Unlock()
}

func (q *queue) trim() {
	for len(q.batches) > q.capacity {
		q.m.dropped[dropQueueFull].Add(uint64(len(q.batches[0].items)))
		q.batches[0] = nil
		q.batches = q.batches[1:]
	}
	q.m.queueLength.Store(int64(len(q.batches)))
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
			q.m.queueLength.Store(int64(len(q.batches)))
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

// close says no batch will be added any more: take returns nil once the
// queue is empty.
func (q *queue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.signal()
}

// dropAll drops what is left, for the given reason.
func (q *queue) dropAll(reason dropReason) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, b := range q.batches {
		q.m.dropped[reason].Add(uint64(len(b.items)))
	}
	q.batches = nil
	q.m.queueLength.Store(0)
}
