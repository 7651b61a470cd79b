package agent

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sprof/sprof/exporters/pyroscope"
)

// sender is a destination of profiles: Pyroscope, or an OTLP endpoint.
type sender interface {
	// send delivers series, all of one interval, and says for each one
	// why it was not delivered, nil when it was.
	send(ctx context.Context, series []pyroscope.Series) []error
	// retryable says whether a failure send reported is worth sending
	// again.
	retryable(err error) bool
	// sentBytes counts the request bytes sent so far, retries included.
	sentBytes() uint64
}

// delivery sends the intervals queued for one destination, oldest first,
// and accounts for every interval: delivered, written out for later
// (spilled), or dropped.
type delivery struct {
	// to names the destination in the log and in the spill directory.
	to     string
	sender sender
	queue  *queue
	cfg    *Config
	log    *slog.Logger
	// out, when not nil, receives the intervals that cannot be delivered.
	out *outputDir
	// delivered, spilled and dropped count intervals: the first on the
	// sending goroutine only, the others also where the queue pushes
	// intervals out.
	delivered, spilled, dropped atomic.Uint64
	// sentOK and sentFailed count the profiles sent by result, droppedBy
	// the profiles never delivered by reason; lastOK is when a profile
	// was last delivered (Unix nanoseconds).
	sentOK, sentFailed atomic.Uint64
	droppedBy          [numDropReasons]atomic.Uint64
	lastOK             atomic.Int64
}

// add queues an interval's series.
func (d *delivery) add(items []pyroscope.Series) {
	b := &batch{start: items[0].Profile.Start, items: slices.Clone(items)}
	d.discard(d.queue.add(b), dropQueueFull)
}

// loop sends the queued intervals in order until ctx is done or the queue
// is closed and empty. After a failure it waits, RetryBackoff first and
// twice as long after each further failure up to Interval, and tries the
// same interval again: the server is most likely down, and the queue
// bounds what waits meanwhile.
func (d *delivery) loop(ctx context.Context) {
	wait := d.cfg.RetryBackoff
	failing := false
	for {
		b := d.queue.take(ctx)
		if b == nil {
			return
		}
		err := d.sendBatch(ctx, b)
		if err == nil {
			if len(b.refused) == 0 {
				d.delivered.Add(1)
			} else {
				d.writeOut(b)
			}
			if failing {
				d.log.Info("deliveries resumed", "to", d.to)
				failing = false
			}
			wait = d.cfg.RetryBackoff
			continue
		}
		d.discard(d.queue.putBack(b), dropQueueFull)
		if ctx.Err() != nil {
			return // stopping: finish accounts for what is left
		}
		if !failing {
			d.log.Warn("delivery failed; retrying while newer intervals queue up", "to", d.to, "err", err, "queue", d.cfg.Queue)
		}
		failing = true
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, max(d.cfg.Interval, d.cfg.RetryBackoff))
	}
}

// sendBatch sends b's series, removing those delivered, and moving those
// refused for good to b.refused. It returns an error when any are left to
// try again.
func (d *delivery) sendBatch(ctx context.Context, b *batch) error {
	errs := d.sender.send(ctx, b.items)
	var left []pyroscope.Series
	var first error
	for i, err := range errs {
		it := b.items[i]
		if err == nil {
			d.sentOK.Add(1)
			d.lastOK.Store(time.Now().UnixNano())
			continue
		}
		d.sentFailed.Add(1)
		if retry, reason := outcome(d.sender, err); !retry && ctx.Err() == nil {
			d.droppedBy[reason].Add(1)
			d.log.Error("profile refused", "to", d.to, "service", it.Service, "container", it.Container, "reason", reason.String(), "err", err)
			b.refused = append(b.refused, it)
			continue
		}
		left = append(left, it)
		if first == nil {
			first = err
		}
	}
	b.items = left
	return first
}

// discard accounts for intervals that will not be delivered: their
// profiles still queued count as dropped for reason, and each interval is
// written out (writeOut).
func (d *delivery) discard(bs []*batch, reason dropReason) {
	for _, b := range bs {
		d.droppedBy[reason].Add(uint64(len(b.items)))
		d.writeOut(b)
	}
	if len(bs) > 0 && d.out != nil && reason != dropShutdown {
		d.log.Warn("intervals not delivered; written out instead", "to", d.to, "count", len(bs), "reason", reason.String(), "dir", d.out.spillDir(d.to))
	}
}

// writeOut accounts for an interval not delivered whole: what of it was
// not delivered (still queued, or refused) goes to the output directory's
// spill directory for this destination when there is one, and the
// interval counts as spilled; else it counts as dropped.
func (d *delivery) writeOut(b *batch) {
	items := append(slices.Clip(b.items), b.refused...)
	if d.out == nil {
		d.dropped.Add(1)
		return
	}
	n, errs := d.out.spill(d.to, b.start, items)
	if n < len(items) {
		d.log.Error("write undelivered profiles", "to", d.to, "err", errs)
		d.dropped.Add(1)
		return
	}
	d.spilled.Add(1)
}

// finish accounts for what is still queued once loop has returned and
// logs what became of every interval.
func (d *delivery) finish(queuedAtStop int) {
	d.discard(d.queue.takeAll(), dropShutdown)
	attrs := []any{"to", d.to, "delivered", d.delivered.Load(), "spilled", d.spilled.Load(), "dropped", d.dropped.Load(),
		"queued_at_stop", queuedAtStop}
	if d.out != nil {
		attrs = append(attrs, "spill_dir", d.out.spillDir(d.to))
	}
	if d.spilled.Load()+d.dropped.Load() > 0 {
		d.log.Warn("stopped; some intervals were not delivered", attrs...)
	} else {
		d.log.Info("stopped; every interval delivered", attrs...)
	}
}

// newDelivery makes the delivery to a destination.
func (a *Agent) newDelivery(to string, s sender) *delivery {
	return &delivery{to: to, sender: s, queue: newQueue(a.cfg.Queue), cfg: &a.cfg, log: a.log, out: a.out}
}

// flush runs at exit, once the last interval is queued: the deliveries
// send what is queued, in order, until it is all sent or deadline fires
// (stop ends them then), and then account for the rest.
func (a *Agent) flush(delivering *sync.WaitGroup, deadline <-chan time.Time, stop context.CancelFunc) {
	queued := make([]int, len(a.deliveries))
	for i, d := range a.deliveries {
		queued[i] = d.queue.len()
		d.queue.close()
	}
	done := make(chan struct{})
	go func() {
		delivering.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-deadline:
	}
	stop()
	<-done
	for i, d := range a.deliveries {
		d.finish(queued[i])
	}
}
