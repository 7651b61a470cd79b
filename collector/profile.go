package collector

import (
	"encoding/binary"
	"time"

	"github.com/sprof/sprof/stacks"
)

// mappingKey makes processes that map the same file at the same place
// share one stacks.Mapping.
type mappingKey struct {
	bin                  *binaryFile
	start, limit, offset uint64
}

// locationKey identifies a Location. A return address is symbolized one
// byte earlier, inside its call, so it is a different Location from the
// same address as a leaf.
type locationKey struct {
	m      *stacks.Mapping
	addr   uint64
	isCall bool
}

// builder resolves each distinct address once while building a Profile.
type builder struct {
	c        *Collector
	p        *stacks.Profile
	mappings map[mappingKey]*stacks.Mapping
	kernel   *stacks.Mapping
	unknown  *stacks.Mapping
	locs     map[locationKey]*stacks.Location
	locIDs   map[*stacks.Location]uint64
	failed   map[*binaryFile]bool
	frames   []stacks.Frame
}

// Profile builds the profile of everything aggregated so far: it resolves
// every distinct address to its mapping as the process had it when the
// sample was taken, and symbolizes it once.
func (c *Collector) Profile() *stacks.Profile {
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
		locs:     map[locationKey]*stacks.Location{},
		locIDs:   map[*stacks.Location]uint64{},
		failed:   map[*binaryFile]bool{},
	}
	merged := map[string]*stacks.Sample{}
	var key []byte
	for i := range c.agg.entries {
		e := &c.agg.entries[i]
		s := &stacks.Sample{Count: e.count, Pid: e.pid, Tid: e.tid, Comm: commString(e.comm), Truncated: e.truncated}
		for j, addr := range e.kernel.of(c.agg.words) {
			s.Stack = append(s.Stack, b.kernelLocation(addr, j > 0))
		}
		for j, addr := range e.user.of(c.agg.words) {
			s.Stack = append(s.Stack, b.userLocation(e.set, addr, j > 0))
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
	for _, l := range s.Stack {
		key = binary.AppendUvarint(key, b.locIDs[l])
	}
	return key
}

func (b *builder) location(k locationKey, symbolize func() []stacks.Frame) *stacks.Location {
	if l := b.locs[k]; l != nil {
		return l
	}
	l := &stacks.Location{Mapping: k.m, Address: k.addr}
	if fr := symbolize(); len(fr) > 0 {
		l.Frames = append([]stacks.Frame(nil), fr...)
	}
	b.locs[k] = l
	b.locIDs[l] = uint64(len(b.locIDs))
	return l
}

// symbolAddr is where to look up addr: a return address points after its
// call, which may be the first byte of the next function.
func symbolAddr(addr uint64, isCall bool) uint64 {
	if isCall && addr > 0 {
		return addr - 1
	}
	return addr
}

func (b *builder) kernelLocation(addr uint64, isCall bool) *stacks.Location {
	if b.kernel == nil {
		b.kernel = b.addMapping(&stacks.Mapping{Kind: stacks.Kernel, File: stacks.KernelFile, Start: addr, Limit: addr + 1})
	}
	b.kernel.Start, b.kernel.Limit = min(b.kernel.Start, addr), max(b.kernel.Limit, addr+1)
	return b.location(locationKey{b.kernel, addr, isCall}, func() []stacks.Frame {
		if b.c.opts.Kernel == nil {
			return nil
		}
		b.frames = b.c.opts.Kernel.Symbolize(b.frames[:0], symbolAddr(addr, isCall))
		return b.frames
	})
}

func (b *builder) userLocation(set *mapSet, addr uint64, isCall bool) *stacks.Location {
	m := set.find(addr)
	if m == nil {
		if b.unknown == nil {
			b.unknown = b.addMapping(&stacks.Mapping{Kind: stacks.Unknown, File: stacks.UnknownFile})
		}
		return b.location(locationKey{b.unknown, addr, false}, func() []stacks.Frame { return nil })
	}
	mk := mappingKey{m.bin, m.start, m.limit, m.offset}
	sm := b.mappings[mk]
	if sm == nil {
		sm = b.addMapping(&stacks.Mapping{Kind: stacks.User, Start: m.start, Limit: m.limit, Offset: m.offset, File: m.bin.name, BuildID: m.bin.buildID})
		b.mappings[mk] = sm
	}
	return b.location(locationKey{sm, addr, isCall}, func() []stacks.Frame {
		sym := b.c.opts.Symbolizer
		if sym == nil || b.failed[m.bin] || !m.bin.readable() {
			return nil
		}
		off := symbolAddr(addr, isCall) - m.start + m.offset
		fr, err := sym.Symbolize(b.frames[:0], m.bin.binary(), off)
		if err != nil {
			b.failed[m.bin] = true
			b.c.stats.SymbolizeErrors++
			return nil
		}
		b.frames = fr
		return fr
	})
}

func (b *builder) addMapping(m *stacks.Mapping) *stacks.Mapping {
	b.p.Mappings = append(b.p.Mappings, m)
	return m
}
