package report

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/sprof/sprof/cbf"
	"github.com/sprof/sprof/cbf/recording"
	"github.com/sprof/sprof/stacks"
	"github.com/sprof/sprof/stacks/locations"
	"github.com/sprof/sprof/symbolize"
	"github.com/sprof/sprof/symbolize/buildid"
	"github.com/sprof/sprof/symbolize/cpython"
	"github.com/sprof/sprof/symbolize/jit"
)

// Options select the samples of a recording and say how to symbolize
// them. The zero value converts every sample and symbolizes nothing.
type Options struct {
	// Pids keeps only the samples of these processes; empty keeps all.
	Pids []uint32
	// Comms keeps only the samples whose thread or process name is one
	// of these; empty keeps all.
	Comms []string
	// From and To keep the samples taken in [From, To), as offsets from
	// the recording's start; To 0 means to the end.
	From, To time.Duration
	// Symbolizer names user addresses, Kernel kernel ones; either may be
	// nil, leaving those frames unnamed.
	Symbolizer symbolize.Symbolizer
	Kernel     locations.KernelSymbolizer
	// Progress, when not nil, is told how many bytes of the recording
	// have been read, as they are.
	Progress func(read int64)
}

// Result describes a conversion.
type Result struct {
	Header recording.Header
	// Samples counts the samples read, Kept those that passed the
	// filters; OffCPUKept counts the off-CPU records that passed them.
	Samples, Kept, OffCPUKept uint64
	// Damage lists the damaged stretches of the recording that were
	// skipped (the first 64), Damaged counts them; everything else was
	// converted.
	Damage  []*recording.DamagedError
	Damaged int
	// Unplaced counts the samples of intact chunks left out because
	// their stacks or process maps were in damaged ones.
	Unplaced uint64
	// Written is the number of samples the writer recorded, from the
	// End chunk; 0 when it has none (the writer was killed, or the
	// chunk damaged).
	Written uint64
	// Last is the time of the last sample read, from the start.
	Last time.Duration
	// Missing lists the binaries, by path, that were not found or had
	// another build ID than recorded; their frames are unnamed.
	Missing []string
	// SymbolizeErrors counts binaries the Symbolizer could not read.
	SymbolizeErrors int
}

// sampleKey is what makes two samples of a recording the same.
type sampleKey struct {
	pid, tid     uint32
	comm         string
	container    string
	maps         *cbf.ImageMap // the process's images at the sample's time
	table        *recording.StackTable
	user, kernel int
	truncated    bool
}

// Read converts the recording read from r.
func Read(r io.Reader, opts Options) (*stacks.Profile, *Result, error) {
	if opts.Progress != nil {
		r = &progressReader{r: r, report: opts.Progress}
	}
	rd, err := recording.NewReader(r)
	if err != nil {
		return nil, nil, err
	}
	res := &Result{Header: rd.Header()}
	// Frequency 0: a recording of off-CPU records alone.
	c := &converter{opts: opts, res: res, procs: recording.NewProcessTable(), counts: map[sampleKey]int64{},
		offCPU: map[sampleKey]int64{}, jit: map[uint32]*jit.Table{},
		python: map[uint32]map[uint64]stacks.Frame{}}
	var end *recording.End
	for {
		ch, err := rd.Next()
		if errors.Is(err, io.EOF) {
			res.Damage, res.Damaged = rd.Damage()
			break
		}
		if err != nil {
			return nil, res, err
		}
		switch ch.Type {
		case recording.ChunkProcesses:
			c.procs.Add(ch.Processes())
		case recording.ChunkSamples:
			_, n := rd.Damage()
			c.damaged = n > 0
			b, err := ch.Batch()
			if err != nil {
				return nil, res, fmt.Errorf("recording: samples chunk at offset %d: %w", ch.Offset, err)
			}
			c.add(b, false)
		case recording.ChunkOffCPU:
			b, err := ch.Batch()
			if err != nil {
				return nil, res, fmt.Errorf("recording: off-CPU chunk at offset %d: %w", ch.Offset, err)
			}
			c.hasOffCPU = true
			c.add(b, true)
		case recording.ChunkJIT:
			syms, err := ch.JIT()
			if err != nil {
				return nil, res, fmt.Errorf("recording: jit chunk at offset %d: %w", ch.Offset, err)
			}
			c.addJIT(syms)
		case recording.ChunkPython:
			frames, err := ch.Python()
			if err != nil {
				return nil, res, fmt.Errorf("recording: python chunk at offset %d: %w", ch.Offset, err)
			}
			c.addPython(frames)
		case recording.ChunkEnd:
			e, err := ch.End()
			if err != nil {
				return nil, res, fmt.Errorf("recording: end chunk at offset %d: %w", ch.Offset, err)
			}
			end = &e
			res.Written = e.Samples
		}
	}
	res.Last = c.last
	return c.profile(end), res, nil
}

// converter counts the samples of a recording as it is read.
type converter struct {
	opts   Options
	res    *Result
	procs  *recording.ProcessTable
	counts map[sampleKey]int64 // CPU samples
	offCPU map[sampleKey]int64 // nanoseconds off the CPU
	order  []sampleKey         // in order of first sight, for a stable output
	// hasOffCPU is set by the first off-CPU chunk.
	hasOffCPU bool
	// jit holds each process's JIT symbols, in file order (the later
	// wins where they overlap).
	jit map[uint32]*jit.Table
	// python holds each process's Python frame names, by address.
	python map[uint32]map[uint64]stacks.Frame
	lost   uint64
	last   time.Duration // the last sample's time
	// damaged says the reader skipped damage: a sample of a process
	// without a record lost it there.
	damaged bool
}

// add adds a batch's weights to c.counts, or for off-CPU records to
// c.offCPU.
func (c *converter) add(b *recording.Batch, offCPU bool) {
	values := c.counts
	if offCPU {
		values = c.offCPU
	}
	c.lost += b.Lost
	for i := range b.Groups {
		g := &b.Groups[i]
		if !offCPU {
			c.res.Samples += uint64(len(g.Times))
		}
		for _, t := range g.Times {
			c.last = max(c.last, t)
		}
		if !c.keep(g) {
			continue
		}
		if b.Unplaced(g) {
			c.res.Unplaced += uint64(len(g.Times))
			continue
		}
		for _, t := range g.Times {
			if t < c.opts.From || c.opts.To > 0 && t >= c.opts.To {
				continue
			}
			if c.procs.Damaged(g.PID, t) || c.damaged && c.procs.Missing(g.PID, t) {
				c.res.Unplaced++
				continue
			}
			k := sampleKey{pid: g.PID, tid: g.TID, comm: g.Comm, container: c.procs.Container(g.PID, t), maps: c.procs.Map(g.PID, t), table: b.Stacks,
				user: g.User, kernel: g.Kernel, truncated: g.Flags&recording.UserTruncated != 0}
			if _, ok := c.counts[k]; !ok {
				if _, ok := c.offCPU[k]; !ok {
					c.order = append(c.order, k)
				}
			}
			values[k] += int64(g.Weight)
			if offCPU {
				c.res.OffCPUKept++
			} else {
				c.res.Kept++
			}
		}
	}
}

// addJIT adds the JIT symbols of a chunk.
func (c *converter) addJIT(syms []recording.JITSymbol) {
	for _, s := range syms {
		t := c.jit[s.PID]
		if t == nil {
			t = &jit.Table{}
			c.jit[s.PID] = t
		}
		sym := jit.Symbol{Start: s.Start, Size: s.Size, Name: s.Name}
		for _, l := range s.Lines {
			sym.Lines = append(sym.Lines, jit.Line{Offset: l.Offset, File: l.File, Line: l.Line})
		}
		t.Add(sym)
	}
}

// addPython adds the Python frame names of a chunk; a later name of an
// address wins, as the process reused the code object's memory.
func (c *converter) addPython(frames []recording.PythonFrame) {
	for _, f := range frames {
		names := c.python[f.PID]
		if names == nil {
			names = map[uint64]stacks.Frame{}
			c.python[f.PID] = names
		}
		names[f.Addr] = stacks.Frame{Function: f.Function, File: f.File, Line: f.Line}
	}
}

// keep applies the pid and name filters to a group.
func (c *converter) keep(g *recording.Group) bool {
	if len(c.opts.Pids) > 0 && !slices.Contains(c.opts.Pids, g.PID) {
		return false
	}
	return len(c.opts.Comms) == 0 || slices.Contains(c.opts.Comms, g.Comm) ||
		slices.Contains(c.opts.Comms, c.procs.Comm(g.PID, g.Times[0]))
}

func (c *converter) profile(end *recording.End) *stacks.Profile {
	h := &c.res.Header
	stop := c.last
	if end != nil {
		stop = end.Time
	}
	if c.opts.To > 0 {
		stop = min(stop, c.opts.To)
	}
	b := &builder{
		opts: c.opts, res: c.res,
		p: &stacks.Profile{
			Start:    h.Start.Add(c.opts.From),
			Duration: max(stop-c.opts.From, 0),
			OffCPU:   c.hasOffCPU,
			Lost:     c.lost,
		},
		mappings: map[imageKey]*stacks.Mapping{},
		binaries: map[binaryKey]*binary{},
		jit:      c.jit,
		python:   c.python,
	}
	if h.Frequency > 0 {
		b.p.Period = time.Second / time.Duration(h.Frequency)
	}
	b.locs = locations.New(b.p, c.opts.Kernel)
	var frames []cbf.Frame
	for _, k := range c.order {
		s := &stacks.Sample{Count: c.counts[k], OffCPU: time.Duration(c.offCPU[k]), Pid: k.pid, Tid: k.tid, Comm: k.comm, Container: k.container, Truncated: k.truncated}
		if k.kernel >= 0 {
			frames = k.table.Stack(frames[:0], k.kernel)
			for j, f := range frames {
				if f.Kind != cbf.Truncated {
					s.Stack = append(s.Stack, b.locs.Kernel(f.Addr, j > 0))
				}
			}
		}
		if k.user >= 0 {
			frames = k.table.Stack(frames[:0], k.user)
			for j, f := range frames {
				if f.Kind != cbf.Truncated {
					s.Stack = append(s.Stack, b.userLocation(k.pid, k.maps, f.Addr, j > 0))
				}
			}
		}
		b.p.Samples = append(b.p.Samples, s)
	}
	b.locs.Symbolize()
	return b.p
}

// builder resolves and symbolizes each distinct address once.
type builder struct {
	opts     Options
	res      *Result
	p        *stacks.Profile
	locs     *locations.Table
	mappings map[imageKey]*stacks.Mapping
	binaries map[binaryKey]*binary
	jit      map[uint32]*jit.Table
	python   map[uint32]map[uint64]stacks.Frame
}

// imageKey identifies a mapping: the same file at the same place in
// several processes is one.
type imageKey struct {
	path, buildID         string
	base, end, textOffset uint64
}

type binaryKey struct{ path, buildID string }

// binary is a file a recording names, as found now.
type binary struct {
	bin    symbolize.Binary
	usable bool // found, with the recorded build ID; not failed
}

func (b *builder) userLocation(pid uint32, m *cbf.ImageMap, addr uint64, isCall bool) *stacks.Location {
	i := -1
	if m != nil {
		i = m.Lookup(addr)
	}
	if i < 0 && cpython.IsFrame(addr) {
		if f, ok := b.python[pid][addr]; ok {
			return b.locs.Python(pid, addr, func(dst []stacks.Frame, _ uint64) []stacks.Frame { return append(dst, f) })
		}
		return b.locs.Unknown(addr)
	}
	if i < 0 {
		if t := b.jit[pid]; t != nil {
			if l := b.locs.JIT(pid, addr, isCall, t.Frames); l != nil {
				return l
			}
		}
		return b.locs.Unknown(addr)
	}
	im := m.Image(i)
	key := imageKey{im.Path, string(im.BuildID), im.Base, im.EndOfText, im.TextOffset}
	sm := b.mappings[key]
	if sm == nil {
		sm = b.locs.AddMapping(&stacks.Mapping{Kind: stacks.User, Start: im.Base, Limit: im.EndOfText, Offset: im.TextOffset,
			File: im.Path, BuildID: hex.EncodeToString(im.BuildID)})
		b.mappings[key] = sm
	}
	return b.locs.UserDeferred(sm, addr, isCall, func(ats []uint64, fn func(int, []stacks.Frame)) {
		if b.opts.Symbolizer == nil {
			return
		}
		sm.SymbolsTried = true
		bin := b.binary(sm)
		if !bin.usable {
			return
		}
		offs := make([]uint64, len(ats))
		for i, at := range ats {
			offs[i] = im.FileOffset(at)
		}
		if err := symbolize.SymbolizeAll(b.opts.Symbolizer, bin.bin, offs, fn); err != nil {
			bin.usable = false
			b.res.SymbolizeErrors++
		}
	})
}

// binary finds the file of a mapping by its path and checks its build ID,
// once per file.
func (b *builder) binary(m *stacks.Mapping) *binary {
	k := binaryKey{m.File, m.BuildID}
	if bin := b.binaries[k]; bin != nil {
		return bin
	}
	bin := &binary{bin: symbolize.Binary{Path: m.File, Name: m.File, BuildID: m.BuildID}}
	b.binaries[k] = bin
	if m.File == "" || m.File[0] == '[' { // [vdso] and the like: no file to read
		return bin
	}
	if b.opts.Symbolizer == nil {
		return bin
	}
	if m.BuildID != "" {
		if id, err := buildid.File(m.File); err != nil || id != m.BuildID {
			b.res.Missing = append(b.res.Missing, m.File)
			return bin
		}
	}
	bin.usable = true
	return bin
}

// progressReader tells how many bytes have passed through it.
type progressReader struct {
	r      io.Reader
	read   int64
	report func(int64)
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.read += int64(n)
	p.report(p.read)
	return n, err
}
