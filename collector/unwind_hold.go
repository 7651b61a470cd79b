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
// An interval cut while samples are held (Collector.CutInterval) leaves
// them held: they are counted in the interval that is current when their
// table is there, with their whole stack, rather than in theirs with a
// partial one.
//
// With a Sink, only the held samples wait: every other sample, and every
// exit and process change, goes to the Sink at once, and a held sample
// follows when it is let go, after samples taken later. A recording does
// not need time order (cbf/FORMAT.md: process records apply by their
// time, samples chunks are not in time order), and a Sink that waited
// for the slowest table would write nothing for seconds, which a
// recording cut by kill -9 would lose.
//
// Nothing is dropped. Held samples are flushed — unwound with the tables
// there are, which usually leaves the frame-pointer walk of the sampler —
// when the queue outgrows maxHeldBytes (oldest first), with a Sink or when
// intervals are cut when they have waited maxHoldAge, and at the end of a
// recording or when a Profile is built, after waiting up to finalBuildWait
// for the tables under way. UnwindStats counts the samples held, released
// and flushed by cause, and the stop at the binary whose table was
// missing ("table still being built").

const (
	// maxHeldBytes bounds the memory of the held-back samples: their
	// stack copies (16 KiB each by default) and walks. About 2,000
	// samples wait for a table: 10 s of 99 Hz sampling on two CPUs.
	maxHeldBytes = 32 << 20
	// maxHoldAge bounds, with a Sink or intervals, how long a sample is
	// held, so
	// that a build that never ends on a starved host cannot keep
	// samples out of the recording: a held sample reaches the Sink at
	// most maxHoldAge and two drain Intervals (0.5 s) after it was
	// taken, and a recording cut by kill -9 (its writer completes a
	// chunk every second) misses at most about 3.5 s of the samples
	// that wait for a table, against about 1 s of the others. Most
	// tables are built well within 2 s even on a loaded host; only the
	// largest (libLLVM's, 1 to 8 s) then leave some samples with the
	// sampler's frame-pointer walk.
	maxHoldAge = 2 * time.Second
	// lateSample bounds how much earlier than the newest a sample still
	// in the sampler's buffers may be: a drain reads every CPU's buffer
	// in turn, every Interval or sooner.
	lateSample = 5 * time.Second
	// finalBuildWait bounds how long the end of a recording waits for
	// the tables held-back samples need (libLLVM's takes 1 to 8 s).
	finalBuildWait = 10 * time.Second
)

// flushCause is why held-back samples were unwound before their table
// was built.
type flushCause uint8

const (
	flushFull flushCause = iota // the hold-back queue was full
	flushAge                    // the sample waited maxHoldAge (with a Sink or intervals)
	flushEnd                    // the recording ended, or a Profile was built
)

// heldSample is a sample held back until the table of wait is built.
type heldSample struct {
	p            pending
	img          *image
	user, kernel []uint64
	python       []uint64 // pending.python's words
	stack        []byte   // the stack copy
	wait         *unwindInfo
	since        uint64 // the unwinder's clock when it was first held
}

func (h *heldSample) size() int { return len(h.stack) + 8*(len(h.user)+len(h.kernel)+len(h.python)) }

// hold holds back p, a sample of img whose unwind waits for the table of
// wait, flushing the oldest held samples if they outgrow their bound.
func (c *Collector) hold(p *pending, img *image, wait *unwindInfo) {
	u := c.unw
	u.stats.Held++
	p.key.set.frozen = true
	h := heldSample{
		p: *p, img: img, wait: wait, since: u.clock(),
		user:   slices.Clone(p.user.of(c.arena)),
		kernel: slices.Clone(p.kernel.of(c.arena)),
		python: slices.Clone(p.python.of(c.arena)),
		stack:  slices.Clone(u.copied(&p.copy)),
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

// stable says img is pid's image now and stays so through the side-band
// records read: only then may a sample of img reread the process's
// mappings from /proc (a held-back sample's process may have exec'd
// since).
func (c *Collector) stable(pid uint32, img *image) bool {
	return c.table.byPid[pid] == img && !c.changesLater(pid)
}

// releaseHeld installs the tables built since the last call and lets go
// the held samples that no longer wait, or, with force, all of them (for
// cause). With a Sink or intervals, it also flushes the samples held
// maxHoldAge.
func (c *Collector) releaseHeld(force bool, cause flushCause) {
	u := c.unw
	if u == nil {
		return
	}
	u.install()
	var old uint64 // samples held since before old are flushed
	if now := u.clock(); (c.sink != nil || c.continuous) && !force && now > uint64(u.maxHoldAge) {
		old = now - uint64(u.maxHoldAge)
	}
	keep := u.held[:0]
	for i := range u.held {
		h := &u.held[i]
		flush, why := force, cause
		if !force && h.since < old {
			flush, why = true, flushAge
		}
		if !flush && !h.wait.built || !c.letGo(h, flush, why) {
			keep = append(keep, *h)
			continue
		}
		u.heldBytes -= h.size()
	}
	clear(u.held[len(keep):])
	u.held = keep
}

// letGo unwinds and aggregates a held sample (and hands it to the Sink),
// and reports whether it did; false means it waits for another table now.
func (c *Collector) letGo(h *heldSample, force bool, cause flushCause) bool {
	u := c.unw
	img, user, wait := c.unwindCopy(&h.p, h.img, h.user, h.stack, force)
	if wait != nil {
		h.wait = wait
		return false
	}
	if u.res.skipped {
		switch cause {
		case flushFull:
			u.stats.FlushedFull++
		case flushAge:
			u.stats.FlushedAge++
		case flushEnd:
			u.stats.FlushedEnd++
		}
	} else {
		u.stats.Released++
	}
	c.aggregate(&h.p, img, c.splicePython(&h.p, user, h.python), h.kernel)
	return true
}

// sinkHorizon returns a time before which no sample will reach the Sink
// any more: the oldest held sample's, or else now, less lateSample for
// samples still in the sampler's buffers.
func (c *Collector) sinkHorizon() uint64 {
	t := monotonicNow()
	if u := c.unw; u != nil {
		for i := range u.held {
			t = min(t, u.held[i].p.time)
		}
	}
	return t - min(t, uint64(lateSample))
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
		if len(u.held) == 0 || left <= 0 || !u.builds.Wait(left) {
			break
		}
	}
	c.flushHeld(flushEnd)
}
