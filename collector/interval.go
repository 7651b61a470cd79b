package collector

import (
	"context"
	"fmt"

	"github.com/sprof/sprof/stacks"
)

// maxBuildIDCache bounds the build IDs remembered by device and inode
// across intervals; past it the cache starts over, which costs one read of
// each file still in use.
const maxBuildIDCache = 8192

// Cut drains src once more, builds the profile of what was aggregated
// since the previous Cut (or since New), and starts the next interval, for
// an agent that sends one profile every so often for as long as the host
// runs. The process table, the side band and the Symbolizer's caches carry
// over, so a process seen in one interval is attributed in the next
// without rereading /proc, and a binary is read once, not once per
// interval.
//
// The Stats returned describe the interval, except Lost and SidebandLost,
// which count since New, as the kernel does; the profile's Lost is the
// interval's share. Errors (a malformed record, a failed read) are counted
// in Stats.Errors and never stop the recording.
//
// Between intervals the collector forgets what only old stacks needed:
// processes that exited more than 10 s ago, and the files no running
// process maps, whose descriptors it closes so that a deleted binary's
// disk space is freed. Without that a collector running for weeks would
// hold every program that ever ran.
func (c *Collector) Cut(src Source) (*stacks.Profile, Stats) {
	iv := c.CutInterval(src)
	p := iv.Resolve(context.Background())
	return p, iv.Stats
}

// CutInterval is Cut that leaves naming the frames to the caller
// (Interval.Resolve), so that an agent's drains keep their period while
// an interval's binaries are read.
func (c *Collector) CutInterval(src Source) *Interval {
	c.note(c.Drain(src))
	c.continuous = true
	before := c.stats.Lost
	if lost, err := src.Lost(); err != nil {
		c.note(fmt.Errorf("read lost sample count: %w", err))
	} else {
		c.stats.Lost = lost
	}
	iv := c.build()
	iv.p.Lost = 0
	if c.stats.Lost > before {
		iv.p.Lost = c.stats.Lost - before
	}
	c.nextInterval()
	return iv
}

// nextInterval drops the aggregated stacks and the interval's counters and
// forgets processes and files that nothing refers to any more.
func (c *Collector) nextInterval() {
	c.agg = newAggregator()
	clear(c.sampled)
	c.start = c.end
	c.stats = Stats{Lost: c.stats.Lost, SidebandLost: c.stats.SidebandLost, Sideband: c.stats.Sideband}
	now := monotonicNow()
	c.table.prune(now)
	for pid, at := range c.table.failed {
		if now-at >= c.table.refreshEvery {
			delete(c.table.failed, pid) // the rate limit has passed anyway
		}
	}
	c.forgetUnmappedFiles()
	c.jit.forget(c.table)
	if c.py != nil {
		c.py.nextInterval()
	}
}

// forgetUnmappedFiles closes and forgets the files that no process in the
// table maps. A file mapped again later is interned and pinned anew.
func (c *Collector) forgetUnmappedFiles() {
	live := map[*binaryFile]bool{}
	for _, img := range c.table.byPid {
		for _, set := range [...]*mapSet{img.maps, img.beforeExec} {
			if set == nil {
				continue
			}
			for i := range set.maps {
				live[set.maps[i].bin] = true
			}
		}
	}
	fs := c.table.files
	for k, f := range fs.byKey {
		if live[f] {
			continue
		}
		fs.unpin(f)
		delete(fs.byKey, k)
	}
	if len(fs.idByInode) > maxBuildIDCache {
		clear(fs.idByInode)
	}
}
