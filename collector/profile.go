package collector

import (
	"encoding/binary"
	"time"

	"github.com/sprof/sprof/stacks"
	"github.com/sprof/sprof/stacks/locations"
)

// mappingKey makes processes that map the same file at the same place
// share one stacks.Mapping.
type mappingKey struct {
	bin                  *binaryFile
	start, limit, offset uint64
}

// builder resolves each distinct address once while building a Profile.
type builder struct {
	c        *Collector
	p        *stacks.Profile
	locs     *locations.Table
	mappings map[mappingKey]*stacks.Mapping
	failed   map[*binaryFile]bool
}

// Profile builds the profile of everything aggregated so far: it resolves
// every distinct address to its mapping as the process had it when the
// sample was taken, and symbolizes it once. Samples held back for unwind
// tables still being built are aggregated first, after waiting for those
// tables a while (see unwind_hold.go).
func (c *Collector) Profile() *stacks.Profile {
	c.settleHeld()
	began := time.Now()
	b := &builder{
		c: c,
		p: &stacks.Profile{
			Start:    c.start,
			Duration: c.end.Sub(c.start),
			Period:   time.Second / time.Duration(c.opts.Frequency),
			Lost:     c.stats.Lost,
		},
		mappings: map[mappingKey]*stacks.Mapping{},
		failed:   map[*binaryFile]bool{},
	}
	b.locs = locations.New(b.p, c.opts.Kernel)
	merged := map[string]*stacks.Sample{}
	var key []byte
	for i := range c.agg.entries {
		e := &c.agg.entries[i]
		s := &stacks.Sample{Count: e.count, Pid: e.pid, Tid: e.tid, Comm: commString(e.comm), Container: e.container, Truncated: e.truncated}
		for j, addr := range e.kernel.of(c.agg.words) {
			s.Stack = append(s.Stack, b.locs.Kernel(addr, j > 0))
		}
		for j, addr := range e.user.of(c.agg.words) {
			s.Stack = append(s.Stack, b.userLocation(e.pid, e.set, addr, j > 0))
		}
		// Entries differing only in their mapSet (a library loaded in
		// between) are the same stack once resolved.
		key = b.sampleKey(key[:0], s)
		if m := merged[string(key)]; m != nil {
			m.Count += s.Count
			continue
		}
		merged[string(key)] = s
		b.p.Samples = append(b.p.Samples, s)
	}
	c.stats.Build += time.Since(began)
	return b.p
}

func commString(c [16]byte) string {
	for i, ch := range c {
		if ch == 0 {
			return string(c[:i])
		}
	}
	return string(c[:])
}

func (b *builder) sampleKey(key []byte, s *stacks.Sample) []byte {
	key = binary.LittleEndian.AppendUint32(key, s.Pid)
	key = binary.LittleEndian.AppendUint32(key, s.Tid)
	if s.Truncated {
		key = append(key, 1)
	} else {
		key = append(key, 0)
	}
	key = append(key, s.Comm...)
	key = append(key, 0)
	key = append(key, s.Container...)
	key = append(key, 0)
	for _, l := range s.Stack {
		key = binary.AppendUvarint(key, b.locs.ID(l))
	}
	return key
}

func (b *builder) userLocation(pid uint32, set *mapSet, addr uint64, isCall bool) *stacks.Location {
	m := set.find(addr)
	if m == nil {
		if l := b.locs.JIT(pid, addr, isCall, b.c.jit.name(pid)); l != nil {
			return l
		}
		return b.locs.Unknown(addr)
	}
	mk := mappingKey{m.bin, m.start, m.limit, m.offset}
	sm := b.mappings[mk]
	if sm == nil {
		sm = b.locs.AddMapping(&stacks.Mapping{Kind: stacks.User, Start: m.start, Limit: m.limit, Offset: m.offset, File: m.bin.name, BuildID: m.bin.buildID})
		b.mappings[mk] = sm
	}
	return b.locs.User(sm, addr, isCall, func(dst []stacks.Frame, at uint64) []stacks.Frame {
		sym := b.c.opts.Symbolizer
		if sym == nil {
			return dst
		}
		sm.SymbolsTried = true
		bin, readable := b.c.table.files.source(m.bin)
		if b.failed[m.bin] || !readable {
			return dst
		}
		fr, err := sym.Symbolize(dst, bin, at-m.start+m.offset)
		if err != nil {
			b.failed[m.bin] = true
			b.c.stats.SymbolizeErrors++
			return dst
		}
		return fr
	})
}
