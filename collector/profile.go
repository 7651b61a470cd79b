package collector

import (
	"context"
	"encoding/binary"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sprof/sprof/stacks"
	"github.com/sprof/sprof/stacks/locations"
	"github.com/sprof/sprof/symbolize"
	"github.com/sprof/sprof/symbolize/cpython"
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
	iv       *Interval
	locs     *locations.Table
	mappings map[mappingKey]*stacks.Mapping
	bins     map[*binaryFile]*symbolFile
}

// Interval is a profile whose samples, mappings and kernel frames are
// there and whose user frames are still unnamed: building it takes the
// drain goroutine a few milliseconds, naming them (reading debug info,
// converting binaries to GSYM) can take seconds, so Resolve may run on
// another goroutine while the Collector drains on. An Interval holds its
// own descriptors of the files it names frames from: the Collector may
// close its own meanwhile.
type Interval struct {
	// Stats describe the interval; Resolve adds SymbolizeErrors and the
	// time it took to Build.
	Stats Stats

	p     *stacks.Profile
	locs  *locations.Table
	sym   symbolize.Symbolizer
	files []*symbolFile
	// ctx is Resolve's, for the batches it runs.
	ctx context.Context
}

// symbolFile is what Resolve needs of a binaryFile: read when the
// Interval is built, so that Resolve touches no Collector state.
type symbolFile struct {
	bin    symbolize.Binary
	usable bool
	held   *os.File // a duplicate of the pinned descriptor, or nil
	failed bool
}

// Profile builds the profile of everything aggregated so far and names
// its frames: it resolves every distinct address to its mapping as the
// process had it when the sample was taken, and symbolizes it once.
// Samples held back for unwind tables still being built are aggregated
// first, after waiting for those tables a while (see unwind_hold.go).
func (c *Collector) Profile() *stacks.Profile {
	iv := c.unresolved()
	p := iv.Resolve(context.Background())
	// iv.Stats started as c.Stats(): they now hold this profile's work too.
	c.stats.SymbolizeErrors, c.stats.Build = iv.Stats.SymbolizeErrors, iv.Stats.Build
	return p
}

// unresolved builds the Interval of everything aggregated so far, once
// the samples held back for tables being built are in.
func (c *Collector) unresolved() *Interval {
	c.settleHeld()
	return c.build()
}

// build builds the Interval of everything aggregated so far. Held-back
// samples stay held: a cut interval leaves them to the next.
func (c *Collector) build() *Interval {
	began := time.Now()
	iv := &Interval{
		p: &stacks.Profile{
			Start:    c.start,
			Duration: c.end.Sub(c.start),
			OffCPU:   c.opts.OffCPU,
			Lost:     c.stats.Lost,
		},
		sym: c.opts.Symbolizer,
	}
	if c.opts.Frequency > 0 {
		iv.p.Period = time.Second / time.Duration(c.opts.Frequency)
	}
	b := &builder{c: c, iv: iv, mappings: map[mappingKey]*stacks.Mapping{}, bins: map[*binaryFile]*symbolFile{}}
	b.locs = locations.New(iv.p, c.opts.Kernel)
	iv.locs = b.locs
	merged := map[string]*stacks.Sample{}
	var key []byte
	for i := range c.agg.entries {
		e := &c.agg.entries[i]
		s := &stacks.Sample{Count: e.count, OffCPU: time.Duration(e.offCPU), Pid: e.pid, Tid: e.tid, Comm: commString(e.comm), Container: e.container, Truncated: e.truncated}
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
			m.OffCPU += s.OffCPU
			continue
		}
		merged[string(key)] = s
		iv.p.Samples = append(iv.p.Samples, s)
	}
	iv.Stats = c.Stats()
	iv.Stats.Build += time.Since(began)
	return iv
}

// Resolve names the Interval's user frames, one batch per binary, and
// returns its profile. Once ctx is done, the binaries not yet read keep
// their frames unnamed (shown as binary+offset), so that a user who asks
// twice to stop gets the profile at once. Call it once.
func (iv *Interval) Resolve(ctx context.Context) *stacks.Profile {
	began := time.Now()
	defer func() {
		for _, f := range iv.files {
			if f.held != nil {
				f.held.Close()
			}
		}
		iv.files = nil
		iv.Stats.Build += time.Since(began)
	}()
	iv.ctx = ctx
	iv.locs.Symbolize()
	return iv.p
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
	if m == nil && cpython.IsFrame(addr) {
		if b.c.py != nil {
			if l := b.locs.Python(pid, addr, b.c.py.name(pid, addr)); l != nil {
				return l
			}
		}
		return b.locs.Unknown(addr)
	}
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
	f := b.symbolFile(m.bin)
	iv, start, offset := b.iv, m.start, m.offset
	if iv.sym != nil {
		sm.SymbolsTried = true
	}
	return b.locs.UserDeferred(sm, addr, isCall, func(ats []uint64, fn func(int, []stacks.Frame)) {
		if iv.sym == nil || !f.usable || f.failed || iv.ctx.Err() != nil {
			return
		}
		offs := make([]uint64, len(ats))
		for i, at := range ats {
			offs[i] = at - start + offset
		}
		if err := symbolize.SymbolizeAll(iv.sym, f.bin, offs, fn); err != nil {
			f.failed = true
			iv.Stats.SymbolizeErrors++
		}
	})
}

// symbolFile returns what Resolve reads bin through, once per binary.
func (b *builder) symbolFile(bin *binaryFile) *symbolFile {
	if f := b.bins[bin]; f != nil {
		return f
	}
	f := &symbolFile{}
	var pinned *os.File
	f.bin, pinned, f.usable = b.c.table.files.source(bin)
	if pinned != nil {
		// The Collector closes its descriptor when the file is no
		// longer mapped, maybe before Resolve runs: Resolve reads its
		// own.
		fd, err := unix.FcntlInt(pinned.Fd(), unix.F_DUPFD_CLOEXEC, 0)
		if err == nil {
			f.held = os.NewFile(uintptr(fd), bin.name)
			f.bin.Path = "/proc/self/fd/" + strconv.Itoa(fd)
		} else {
			f.usable = false
		}
	}
	b.bins[bin] = f
	b.iv.files = append(b.iv.files, f)
	return f
}
