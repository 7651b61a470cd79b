package collector

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime"
	"slices"
	"sort"
	"time"

	"github.com/sprof/sprof/internal/elfx"
	"github.com/sprof/sprof/sframe"
	"github.com/sprof/sprof/unwind"
)

// Unwinding in userspace.
//
// Most code on a host is built without frame pointers, and the BPF
// program's frame-pointer walk loses every caller of such a function. For
// processes that map such code, the sampler copies the user stack above SP
// with the registers (bpf.Config.StackCopy), and the collector unwinds the
// copy here, frame by frame with the best rule the frame's binary has: its
// .sframe section; else rules synthesized from .eh_frame and .debug_frame
// (package sframe/synth); else, for code that keeps frame pointers (Go
// binaries), the frame-pointer rule. One stack may use all three: a Go
// program calling a C library through cgo, or a C program whose
// libc callbacks run code with .sframe.
//
// Tables are built once per build ID, in the background, when a sample
// first needs them (unwind_build.go); samples that need a table still being
// built are held back until it is ready (unwind_hold.go). Tables are kept
// under a memory budget (unwind.TableCache: least recently used first
// out). Which processes need the copy is decided when their mappings
// become known (the side band's mmap records, /proc): a process mapping
// any executable file that is not known to keep frame pointers is marked
// through CopyMarker.
// Everything else keeps the cheaper BPF walk.
//
// The walk kept for a sample with a copy: the userspace unwind, unless
//   - it stopped short of the outermost frame while the BPF walk is longer
//     and agrees with it on every frame both have: the BPF walk is the
//     userspace one continued through frame pointers the tables did not
//     cover (JIT code, hand-written assembly without CFI); or
//   - it used no table, only frame pointers (a Go program, when every
//     process is copied): the BPF walk followed the same chain and also
//     knows the return address of a leaf caught in its prologue.
// A BPF walk that disagrees went wrong at the first frame without a frame
// pointer: the tables win. A BPF walk kept goes on by the tables where its
// chain of frame records ended (unwind_resume.go).

// CopyMarker is implemented by a Source whose sampler copies user stacks
// for marked processes (collector/bpfsource does, over bpf.Sampler.SetCopy).
type CopyMarker interface {
	SetCopy(pid uint32, on bool) error
}

// Defaults of the unwinder's memory bounds.
const (
	// DefaultUnwindCacheBytes bounds the unwind tables kept: libc's
	// takes about 1 MiB, a large C++ binary's tens of MiB.
	DefaultUnwindCacheBytes = 256 << 20
	// maxCopyBytes bounds the stack copies held for one drain; samples
	// past it keep their BPF walk (and are counted).
	maxCopyBytes = 64 << 20
	// maxUnwindFrames is the deepest user stack unwound in userspace.
	maxUnwindFrames = 256
)

// stackCopy is a sample's registers and where its stack bytes sit in the
// drain's copy arena; leaf says the BPF walk's frame 1 is the leaf's
// return address (Sample.LeafReturn).
type stackCopy struct {
	regs            sframe.Regs
	off, n          int
	truncated, leaf bool
}

// unwindInfo is what the unwinder knows of one binary (one build ID).
type unwindInfo struct {
	name, buildID string
	// classified: the ELF headers were read; readable says they could be.
	classified, readable bool
	// framePointers: the code keeps frame pointers (a Go binary).
	framePointers bool
	hasSFrame     bool
	loads         elfx.Segments
	// entry is the ELF entry point (e_entry), where the kernel starts
	// the process when the binary is its executable or its interpreter.
	entry uint64
	// built: the table was built (or failed to be: err); table is nil
	// for a binary without one. building: it is being built.
	built, building bool
	// cfiBytes is the size of the binary's CFI sections, what building
	// its table costs.
	cfiBytes int64
	table    *sframe.Table
	kind     unwind.Method
	size     int64
	err      error
	// cached is the table's place in the unwinder's TableCache, nil
	// when it is not there.
	cached *unwind.Cached[*unwindInfo]
	// kernelID names the table loaded into the kernel (0: not loaded),
	// kernelErr why it could not be (unwind_kernel.go). kernelSaved: its
	// kernel form is in the store; kernelLooked: the store was looked in
	// for it since it was last evicted.
	kernelID                  uint64
	kernelErr                 error
	kernelSaved, kernelLooked bool
	// Counters: frames each method produced with this binary's rules,
	// and why unwinds stopped in it.
	frames [unwind.NumMethods]uint64
	stops  [unwind.NumStops]uint64
}

// step is one frame the unwinder resolved: the binary whose rule it used.
type step struct {
	info     *unwindInfo
	pc, bias uint64
}

// unwinder unwinds stack copies; a Collector has one when Options.StackCopy
// is set.
type unwinder struct {
	files  *files
	sf     sframe.Unwinder
	res    resolver
	snap   sframe.Snapshot
	out    [maxUnwindFrames]uint64
	steps  [maxUnwindFrames]step
	nsteps int
	// debug counts BPF-walk frames per binary too, which costs a mapping
	// lookup per frame of every sample.
	debug bool

	byFile map[*binaryFile]*unwindInfo
	byID   map[string]*unwindInfo
	// unknown collects stops at PCs in no known mapping.
	unknown unwindInfo
	tables  *unwind.TableCache[*unwindInfo]

	// Copy marking: marked holds the processes marked, considered the
	// mapSet last examined per pid, toMark the marks made before the
	// Source was known; attached says it is known (marker is nil if it
	// cannot mark).
	marker     CopyMarker
	attached   bool
	marked     map[uint32]bool
	considered map[uint32]*mapSet
	toMark     []uint32

	// copies: samples may carry stack copies, and processes are marked
	// for them (Options.StackCopy). kt is what the kernel was told of
	// tables and mappings, nil unless it walks stacks over tables.
	copies bool
	kt     *kernelTables

	// stack holds the stack bytes of the current drain's samples.
	stack []byte
	stats UnwindStats

	// builds builds tables in the background (unwind_build.go), keeping
	// them in store if not nil, where kernel forms go too
	// (unwind_kernel.go).
	builds *unwind.Builder[*unwindInfo]
	store  *unwind.Store
	// The samples held back (unwind_hold.go): in the order they were
	// held, heldBytes their size, bounded by maxHeld; with a Sink, none
	// is held longer than maxHoldAge by clock (CLOCK_MONOTONIC in ns,
	// a test's own); finalWait bounds the wait for tables at the end.
	held       []heldSample
	heldBytes  int
	maxHeld    int
	maxHoldAge time.Duration
	clock      func() uint64
	finalWait  time.Duration
}

func newUnwinder(fs *files, budget int64, debug, copies bool, store *unwind.Store) *unwinder {
	if budget <= 0 {
		budget = DefaultUnwindCacheBytes
	}
	u := &unwinder{
		files:      fs,
		debug:      debug,
		copies:     copies,
		byFile:     map[*binaryFile]*unwindInfo{},
		byID:       map[string]*unwindInfo{},
		unknown:    unwindInfo{name: "[unknown]", classified: true, built: true},
		tables:     unwind.NewTableCache[*unwindInfo](budget),
		marked:     map[uint32]bool{},
		considered: map[uint32]*mapSet{},
		builds:     unwind.NewBuilder[*unwindInfo](unwind.BuildTable, store),
		store:      store,
		maxHeld:    maxHeldBytes,
		maxHoldAge: maxHoldAge,
		clock:      monotonicNow,
		finalWait:  finalBuildWait,
	}
	u.res.u = u
	u.sf = sframe.Unwinder{Arch: nativeArch(), Resolver: &u.res}
	return u
}

func nativeArch() sframe.Arch {
	if runtime.GOARCH == "arm64" {
		return sframe.ArchARM64
	}
	return sframe.ArchAMD64
}

// keep copies a sample's stack bytes into the drain's arena.
func (u *unwinder) keep(s *Sample) stackCopy {
	if len(s.StackCopy) == 0 {
		return stackCopy{}
	}
	u.stats.Copies++
	u.stats.CopyBytes += uint64(len(s.StackCopy))
	if s.StackCopyTruncated {
		u.stats.TruncatedCopies++
	}
	if len(u.stack)+len(s.StackCopy) > maxCopyBytes {
		u.stats.DroppedCopies++
		return stackCopy{}
	}
	c := stackCopy{
		regs:      sframe.Regs{PC: s.PC, SP: s.SP, FP: s.FP, LR: s.LR},
		off:       len(u.stack),
		n:         len(s.StackCopy),
		truncated: s.StackCopyTruncated,
		leaf:      s.LeafReturn,
	}
	u.stack = append(u.stack, s.StackCopy...)
	return c
}

// info returns the unwindInfo of m's binary, shared by every file with
// the same build ID.
func (u *unwinder) info(m *mapping) *unwindInfo {
	if in := u.byFile[m.bin]; in != nil {
		return in
	}
	var in *unwindInfo
	if id := m.bin.buildID; id != "" {
		in = u.byID[id]
		if in == nil {
			in = &unwindInfo{name: m.bin.name, buildID: id}
			u.byID[id] = in
		}
	} else {
		in = &unwindInfo{name: m.bin.name}
	}
	u.byFile[m.bin] = in
	return in
}

// classify reads the ELF headers of in's binary, as pid maps it at m.
func (u *unwinder) classify(in *unwindInfo, pid uint32, m *mapping) {
	if in.classified {
		return
	}
	in.classified = true
	err := u.withELF(pid, m, func(f *elf.File) error {
		in.framePointers = elfx.IsGo(f)
		for _, s := range f.Sections {
			switch s.Name {
			case ".sframe":
				in.hasSFrame = true
				in.cfiBytes += int64(s.Size)
			case ".eh_frame", ".debug_frame":
				in.cfiBytes += int64(s.Size)
			}
		}
		in.loads = elfx.LoadSegments(f)
		in.entry = f.Entry
		return nil
	})
	if err != nil {
		in.err, in.built = err, true
		return
	}
	in.readable = true
}

// withELF opens the file of m as pid maps it and calls fn with it.
func (u *unwinder) withELF(pid uint32, m *mapping, fn func(*elf.File) error) error {
	var r io.ReaderAt
	if h := m.bin.pinned; h != nil {
		r = h
	} else {
		h := u.files.open(pid, m)
		if h == nil {
			return fmt.Errorf("%s: cannot open", m.bin.name)
		}
		defer h.Close()
		r = h
	}
	return elfx.Read(r, m.bin.name, fn)
}

// ensureTable reports whether in's table is there (or known not to be),
// and asks for it to be built the first time a sample needs it.
func (u *unwinder) ensureTable(in *unwindInfo, pid uint32, m *mapping) bool {
	u.tables.Use(in.cached)
	switch {
	case in.built:
	case in.framePointers:
		in.built = true // Go: frame pointers throughout, no table needed
	case !in.building:
		u.requestBuild(in, pid, m)
	}
	return in.built
}

// infos returns every unwindInfo once.
func (u *unwinder) infos() []*unwindInfo {
	seen := map[*unwindInfo]bool{}
	var out []*unwindInfo
	for _, in := range u.byFile {
		if !seen[in] {
			seen[in] = true
			out = append(out, in)
		}
	}
	return out
}

// resolver maps a PC of the sample being unwound to its binary's table
// and load bias. It remembers the mappings it resolved for the sample, a
// few at most (a stack goes back and forth between a program and its
// libraries), so that most frames cost no search.
type resolver struct {
	u     *unwinder
	pid   uint32
	set   *mapSet
	seen  [4]resolved
	nseen int
	// waiting is the first binary of the unwind whose table is still
	// being built: the unwind stopped there, and the sample waits.
	// forced unwinds without waiting (a held-back sample being flushed);
	// skipped says it went on without such a table.
	waiting         *unwindInfo
	forced, skipped bool
}

// resolved is a mapping the resolver found, and what the unwinder needs
// of it.
type resolved struct {
	m    *mapping
	info *unwindInfo
	sm   sframe.Mapping
}

func (r *resolver) reset(pid uint32, set *mapSet, forced bool) {
	r.pid, r.set, r.nseen, r.waiting, r.forced, r.skipped = pid, set, 0, nil, forced, false
	r.u.nsteps = 0
}

func (r *resolver) Resolve(pc uint64) (sframe.Mapping, bool) {
	u := r.u
	for i := range r.seen[:min(r.nseen, len(r.seen))] {
		if s := &r.seen[i]; pc >= s.m.start && pc < s.m.limit {
			u.record(s.info, pc, s.sm.Bias)
			return s.sm, true
		}
	}
	m := r.set.find(pc)
	if m == nil {
		u.record(nil, pc, 0)
		return sframe.Mapping{}, false
	}
	in := u.info(m)
	u.classify(in, r.pid, m)
	if !u.ensureTable(in, r.pid, m) {
		if r.forced {
			r.skipped = true
		} else if r.waiting == nil {
			r.waiting = in
		}
	}
	s := &r.seen[r.nseen%len(r.seen)]
	r.nseen++
	*s = resolved{m, in, sframe.Mapping{Table: in.table, Bias: in.bias(m), FramePointers: in.framePointers}}
	u.record(in, pc, s.sm.Bias)
	return s.sm, true
}

func (u *unwinder) record(in *unwindInfo, pc, bias uint64) {
	if u.nsteps < len(u.steps) {
		u.steps[u.nsteps] = step{in, pc, bias}
		u.nsteps++
	}
}

// bias returns what to subtract from a runtime address in m to get the
// file's virtual address.
func (in *unwindInfo) bias(m *mapping) uint64 { return in.loads.Bias(m.start, m.offset) }

// method returns the method that unwound the frame at s.
func (s *step) method() unwind.Method {
	in := s.info
	if in.table == nil {
		return unwind.MethodFramePointer
	}
	if !in.framePointers && in.table.Header.Flags&sframe.FlagFramePointer == 0 {
		return in.kind // without a row the unwind would have stopped
	}
	pc := s.pc
	if _, ok := in.table.Lookup(pc - s.bias); !ok {
		return unwind.MethodFramePointer
	}
	return in.kind
}

// unwindSample unwinds the stack copy of p, a sample of img, and returns
// the user stack to aggregate, setting p's mapSet and truncation. A PC in
// no known mapping rereads /proc (rate-limited) as for BPF stacks, so the
// image returned may be a new one. It returns false, having held p back,
// if the unwind needs a table still being built.
func (c *Collector) unwindSample(p *pending, img *image, bpf []uint64) (*image, []uint64, bool) {
	img, user, wait := c.unwindCopy(p, img, bpf, c.unw.copied(&p.copy), false)
	if wait != nil {
		c.hold(p, img, wait)
		return img, nil, false
	}
	return img, user, true
}

// unwindCopy is unwindSample without holding back, over the stack bytes
// stack: it returns the binary whose table the unwind waits for instead,
// unless forced, which unwinds with the tables there are.
func (c *Collector) unwindCopy(p *pending, img *image, bpf []uint64, stack []byte, forced bool) (*image, []uint64, *unwindInfo) {
	u := c.unw
	us, stop := u.unwindBytes(p.key.pid, p.key.set, p.copy.regs, stack, forced)
	if u.res.waiting != nil {
		return img, nil, u.res.waiting
	}
	if stop == unwind.Unmapped && p.key.set == img.maps && c.stable(p.key.pid, img) {
		if n := c.table.refresh(img, p.time); n.maps != p.key.set {
			img, p.key.set = n, n.maps
			if us, stop = u.unwindBytes(p.key.pid, p.key.set, p.copy.regs, stack, forced); u.res.waiting != nil {
				return img, nil, u.res.waiting
			}
		}
	}
	user, userspace, stop := u.account(p.key.set, us, stop, bpf)
	if userspace {
		p.key.truncated = stop.Truncated()
	} else {
		// resume unwinds again: the hold-back's caller reads whether
		// this unwind skipped a table being built (unwind_hold.go).
		skipped := u.res.skipped
		user, p.key.truncated = u.resume(p.key.pid, p.key.set, &p.copy, stack, user, p.key.truncated)
		u.res.skipped = skipped
	}
	return img, user, nil
}

// copied returns the stack bytes of c, a copy in the drain's arena.
func (u *unwinder) copied(c *stackCopy) []byte { return u.stack[c.off : c.off+c.n] }

// unwind walks a stack copy of the drain over the mappings set.
func (u *unwinder) unwind(pid uint32, set *mapSet, c *stackCopy) ([]uint64, unwind.Stop) {
	return u.unwindBytes(pid, set, c.regs, u.copied(c), false)
}

// unwindBytes walks the stack bytes stack, copied at regs, over the
// mappings set; forced, it goes on past tables still being built.
func (u *unwinder) unwindBytes(pid uint32, set *mapSet, regs sframe.Regs, stack []byte, forced bool) ([]uint64, unwind.Stop) {
	return u.unwindFrom(pid, set, regs, regs.SP, stack, forced)
}

// unwindFrom is unwindBytes from the frame with registers regs, over
// stack copied at base.
func (u *unwinder) unwindFrom(pid uint32, set *mapSet, regs sframe.Regs, base uint64, stack []byte, forced bool) ([]uint64, unwind.Stop) {
	u.res.reset(pid, set, forced)
	u.snap = sframe.Snapshot{Base: base, Data: stack}
	n, stop := u.sf.Unwind(regs, &u.snap, u.out[:])
	return u.out[:n], unwind.FromSFrame(stop)
}

// account counts an unwind's frames and its stop, and returns the walk to
// keep (see the rule in the file comment), whether it is the userspace
// one, and why the userspace walk stopped. A return address in no mapping
// ends the userspace walk and is no frame of it: such values (0x8000000001
// in a g++ stack) are data the rules read where no return address was.
func (u *unwinder) account(set *mapSet, us []uint64, stop unwind.Stop, bpf []uint64) ([]uint64, bool, unwind.Stop) {
	steps := u.steps[:u.nsteps]
	last := &u.unknown
	if len(steps) > 0 && steps[len(steps)-1].info != nil {
		last = steps[len(steps)-1].info
		if stop == unwind.NoRule && last.table == nil {
			stop = unwind.NoTable
			if last.building {
				stop = unwind.TablePending
			}
		}
	}
	last.stops[stop]++
	tables := false
	for i := 0; i+1 < len(us) && i < len(steps) && !tables; i++ {
		tables = steps[i].info != nil && steps[i].method() != unwind.MethodFramePointer
	}
	if len(bpf) > 0 && !tables || stop != unwind.Outermost && len(bpf) > len(us) && slices.Equal(bpf[:len(us)], us) {
		u.stats.BPF++
		u.countBPF(set, bpf)
		return bpf, false, stop
	}
	if stop == unwind.Unmapped && len(us) > 1 {
		us = us[:len(us)-1]
	}
	u.stats.Userspace++
	for i := 0; i+1 < len(us) && i < len(steps); i++ {
		s := &steps[i]
		if s.info != nil {
			m := s.method()
			s.info.frames[m]++
			u.stats.Frames[m]++
		}
	}
	return us, true, stop
}

// countBPF counts the frames of a BPF walk: per binary when debugging,
// else only in total.
func (u *unwinder) countBPF(set *mapSet, bpf []uint64) {
	if len(bpf) < 2 {
		return
	}
	u.stats.Frames[unwind.MethodBPF] += uint64(len(bpf) - 1)
	if !u.debug {
		return
	}
	for _, pc := range bpf[:len(bpf)-1] {
		in := &u.unknown
		if m := set.find(pc); m != nil {
			in = u.info(m)
		}
		in.frames[unwind.MethodBPF]++
	}
}

// consider marks pid for stack copies if m maps code that may lack frame
// pointers: any file but a Go binary (the vDSO does not count, Go
// programs call it too).
func (u *unwinder) consider(pid uint32, m *mapping) {
	if !u.copies || u.marked[pid] || m.bin.name[0] == '[' {
		return
	}
	in := u.info(m)
	u.classify(in, pid, m)
	if !in.readable || in.framePointers {
		return
	}
	u.marked[pid] = true
	u.stats.Marked++
	switch {
	case u.marker != nil:
		u.setCopy(pid, true)
	case !u.attached:
		u.toMark = append(u.toMark, pid)
	}
}

// considerSet examines the mappings of a process found through /proc.
func (u *unwinder) considerSet(pid uint32, set *mapSet) {
	if u.marked[pid] || u.considered[pid] == set {
		return
	}
	u.considered[pid] = set
	for i := range set.maps {
		u.consider(pid, &set.maps[i])
	}
}

// exited unmarks a process that exited, keeping the sampler's set small.
func (u *unwinder) exited(pid uint32) {
	delete(u.considered, pid)
	if u.marked[pid] {
		delete(u.marked, pid)
		if u.marker != nil {
			u.setCopy(pid, false)
		}
	}
}

// CopyPids lists the processes marked for stack copies so far, in
// order; called between New and Run, those New found running. They are
// for the sampler's bpf.Config.CopyPids: marked before sampling starts,
// their first samples carry copies too, where the marks Run sends through
// the Source miss the samples taken in between. Nil without
// Options.StackCopy.
func (c *Collector) CopyPids() []uint32 {
	if c.unw == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(c.unw.marked))
}

// attach marks processes for copies through src from now on, and sends
// the marks made before src was known.
func (u *unwinder) attach(src Source) {
	if u.attached {
		return
	}
	u.attached = true
	m, ok := src.(CopyMarker)
	if !ok {
		u.toMark = nil
		return
	}
	u.marker = m
	for _, pid := range u.toMark {
		if u.marked[pid] {
			u.setCopy(pid, true)
		}
	}
	u.toMark = nil
}

func (u *unwinder) setCopy(pid uint32, on bool) {
	if err := u.marker.SetCopy(pid, on); err != nil && !errors.Is(err, os.ErrNotExist) {
		u.stats.MarkErrors++
		if u.stats.MarkErr == nil {
			u.stats.MarkErr = fmt.Errorf("mark pid %d for stack copies: %w", pid, err)
		}
	}
}

// The process's root without CFI.
//
// The kernel starts a dynamically linked process at its interpreter's
// entry point: ld.so's _start, which calls _dl_start and then, as
// _dl_start_user, _dl_init (the libraries' constructors) before jumping
// to the program's own _start. glibc writes that code without CFI, so a
// walk from the loader's relocation work or from a constructor stops
// there for want of a rule, although nothing lies above it: the stack
// holds only argc, argv and the environment. A compiler run spends a few
// percent of its samples there, all of them marked [truncated] before.
// atRoot recognises such a stop: the last frame is in the entry block of
// its binary, the code from the entry point to the first function the
// binary's CFI describes, when none describes the entry point itself.

// maxEntryBlock bounds an entry block: glibc's is under 100 bytes.
const maxEntryBlock = 256

// atRoot reports whether the last frame of user, a stack of a process
// mapped as set, is in the entry block of its binary (see above).
func (u *unwinder) atRoot(set *mapSet, user []uint64) bool {
	if len(user) == 0 {
		return false
	}
	addr := user[len(user)-1]
	if len(user) > 1 {
		addr-- // a return address: the call before it
	}
	m := set.find(addr)
	if m == nil {
		return false
	}
	in := u.byFile[m.bin]
	if in == nil || !in.readable || in.table == nil || in.entry == 0 {
		return false
	}
	pc := addr - in.bias(m)
	if pc < in.entry || pc >= in.entry+maxEntryBlock {
		return false
	}
	fdes := in.table.FDEs()
	next := sort.Search(len(fdes), func(i int) bool { return fdes[i].Start > in.entry })
	if next > 0 && in.entry < fdes[next-1].End() {
		return false // the CFI describes the entry point: its rules decide
	}
	return next == len(fdes) || pc < fdes[next].Start
}
