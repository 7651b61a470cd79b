package collector

import (
	"slices"
	"time"
)

// Holding samples back while their unwind tables are built.
//
// A sample whose unwind reaches a binary whose table is still being built
// (unwind_build.go) is held back with its own copy of its stack bytes and
// walks, and of what the drain knew at its time: its process image and
// mappings (frozen, so that later mmaps copy them). Every drain first
// installs the tables finished since the last one and unwinds the held
// samples they were waiting for, exactly as if the table had been there
// at once; a sample may then wait again for another binary's table. So a
// huge library costs no samples and changes no stack; only the moment the
// sample is aggregated moves.
//
// With a Sink, samples must come out in time order: while any sample is
// held back, every later one (unwound already) and every exit is queued
// behind it, and the queue is let go from its head. Without a Sink,
// samples are aggregated in any order.
//
// Nothing is dropped. Held samples are flushed — unwound with the tables
// there are, which usually leaves the frame-pointer walk of the sampler —
// when the queue outgrows maxHeldBytes (oldest first), when an interval is
// cut, and at the end of a recording or when a Profile is built, after
// waiting up to finalBuildWait for the tables under way. UnwindStats counts
// the samples held, released and flushed by cause, and the stop at the
// binary whose table was missing ("table still being built").

const (
	// maxHeldBytes bounds the memory of the held-back samples: their
	// stack copies (16 KiB each by default) and walks. About 2,000
	// samples wait for a table: 10 s of 99 Hz sampling on two CPUs.
	maxHeldBytes = 32 << 20
	// finalBuildWait bounds how long the end of a recording waits for
	// the tables held-back samples need (libLLVM's takes 1 to 8 s).
	finalBuildWait = 10 * time.Second
)

// flushCause is why held-back samples were unwound before their table
// was built.
type flushCause uint8

const (
	flushFull flushCause = iota // the hold-back queue was full
	flushCut                    // the interval was cut
	flushEnd                    // the recording ended, or a Profile was built
)

// heldSample is a sample held back, or, with a Sink, a sample or an exit
// queued behind one for the Sink's time order.
type heldSample struct {
	p            pending
	img          *image
	user, kernel []uint64
	// stack is the stack copy of a sample whose unwind waits for the
	// table of wait; wait is nil for a sample unwound already.
	stack []byte
	wait  *unwindInfo
	// exit is a side-band exit for the Sink.
	exit *event
}

func (h *heldSample) size() int { return len(h.stack) + 8*(len(h.user)+len(h.kernel)) }

// hold holds back p, a sample of img whose unwind waits for the table of
// wait.
func (c *Collector) hold(p *pending, img *image, wait *unwindInfo) {
	u := c.unw
	u.stats.Held++
	c.queue(heldSample{
		p: *p, img: img, wait: wait,
		user:   slices.Clone(p.user.of(c.arena)),
		kernel: slices.Clone(p.kernel.of(c.arena)),
		stack:  slices.Clone(u.stack[p.copy.off : p.copy.off+p.copy.n]),
	})
}

// queue appends h to the held samples, flushing the oldest if they
// outgrow their bound.
func (c *Collector) queue(h heldSample) {
	u := c.unw
	if h.exit == nil {
		h.p.key.set.frozen = true
	}
	u.held = append(u.held, h)
	u.heldBytes += h.size()
	for u.heldBytes > u.maxHeld && len(u.held) > 0 {
		c.letGo(&u.held[0], true, flushFull)
		u.heldBytes -= u.held[0].size()
		u.held[0] = heldSample{}
		u.held = u.held[1:]
	}
}

// emit hands an aggregated sample to the Sink, or queues it behind the
// held-back samples.
func (c *Collector) emit(p *pending, user, kernel []uint64) error {
	if u := c.unw; u != nil && len(u.held) > 0 && !u.releasing {
		c.queue(heldSample{p: *p, user: slices.Clone(user), kernel: slices.Clone(kernel)})
		return nil
	}
	return c.sink.sample(p, user, kernel)
}

// emitExit hands an exit to the Sink, or queues it behind the held-back
// samples.
func (c *Collector) emitExit(e *event) error {
	if u := c.unw; u != nil && len(u.held) > 0 && c.sink != nil {
		ev := *e
		c.queue(heldSample{exit: &ev})
		return nil
	}
	return c.sink.exit(e)
}

// stable says img is pid's image now and stays so through the side-band
// records read: only then may a sample of img reread the process's
// mappings from /proc (a held-back sample's process may have exec'd
// since).
func (c *Collector) stable(pid uint32, img *image) bool {
	return c.table.byPid[pid] == img && !c.changesLater(pid)
}

// releaseHeld installs the tables built since the last call and lets go
// the held samples that no longer wait, or, with force, all of them (for
// cause). With a Sink, it stops at the first sample that still waits.
func (c *Collector) releaseHeld(force bool, cause flushCause) {
	u := c.unw
	if u == nil {
		return
	}
	u.install()
	ordered := c.sink != nil
	keep := u.held[:0]
	blocked := false
	for i := range u.held {
		h := &u.held[i]
		if blocked || !force && h.wait != nil && !h.wait.built || !c.letGo(h, force, cause) {
			blocked = ordered
			keep = append(keep, *h)
			continue
		}
		u.heldBytes -= h.size()
	}
	clear(u.held[len(keep):])
	u.held = keep
}

// letGo unwinds, aggregates and reports a held sample, and reports
// whether it did; false means it waits for another table now.
func (c *Collector) letGo(h *heldSample, force bool, cause flushCause) bool {
	u := c.unw
	u.releasing = true
	defer func() { u.releasing = false }()
	switch {
	case h.exit != nil:
		c.note(c.sink.exit(h.exit))
		return true
	case h.wait == nil:
		c.note(c.sink.sample(&h.p, h.user, h.kernel))
		return true
	}
	drain := u.stack
	u.stack, h.p.copy.off, u.forced = h.stack, 0, force
	img, user, wait := c.unwindCopy(&h.p, h.img, h.user)
	u.stack, u.forced = drain, false
	if wait != nil {
		h.wait = wait
		return false
	}
	if u.res.skipped {
		switch cause {
		case flushFull:
			u.stats.FlushedFull++
		case flushCut:
			u.stats.FlushedCut++
		case flushEnd:
			u.stats.FlushedEnd++
		}
	} else {
		u.stats.Released++
	}
	c.aggregate(&h.p, img, user, h.kernel)
	return true
}

// flushHeld lets go every held sample now, for cause.
func (c *Collector) flushHeld(cause flushCause) { c.releaseHeld(true, cause) }

// settleHeld lets go every held sample, waiting up to finalBuildWait for
// the tables they need.
func (c *Collector) settleHeld() {
	u := c.unw
	if u == nil {
		return
	}
	deadline := time.Now().Add(u.finalWait)
	for {
		c.releaseHeld(false, flushEnd)
		left := time.Until(deadline)
		if len(u.held) == 0 || left <= 0 || !u.builds.wait(left) {
			break
		}
	}
	c.flushHeld(flushEnd)
}
