package collector

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"

	"github.com/sprof/sprof/sframe"
)

// Unwinding in the kernel.
//
// With Options.KernelTables and a Source that is a TableLoader
// (collector/bpfsource over a sampler with unwind tables), the tables
// built here (unwind_build.go) also go into the kernel, once per binary,
// and each process's executable mappings are described to it as they
// become known: code that keeps frame pointers as such, other code by its
// table once loaded. A table is built when a sample needs it, as for the
// userspace unwinder: a stack copy reaching the binary, or a sample whose
// walk in the kernel did not reach the outermost frame and has a frame in
// it; when sprof follows given processes (Options.Pids), as soon as one of
// them maps the binary, so that their first stacks are whole. The sampler then walks the
// whole user stack at sample time, at any depth, and such samples come
// without a stack copy: they are taken as they are. Until a binary's
// table is loaded (or when it cannot be: no CFI, the kernel's space for
// tables is full), the stack copy and the userspace unwinder (unwind.go)
// remain the fallback where Options.StackCopy is on.
//
// The kernel's space for tables is bounded: to load one, the sampler
// evicts those its walks used least recently. A binary whose table went
// has its mappings wait for it as for a table not built yet, and a
// sample whose walk ends in the binary has it loaded again from the
// table kept here (UnwindStats.KernelReloaded), built again only if the
// unwind cache let it go too.
//
// A process whose mappings change so that one described to the kernel is
// gone (munmap, exec) has all its mappings described again: a stale one
// would give another binary's rules to the code now there.
//
// Executable memory of no file (mapSet.anon: JIT compilers' code) is
// described too, as such, when it is mapped: there the kernel's walk
// takes the frame-pointer rule (with bpf_loop, 5.17), which JIT compilers
// keep (HotSpot with -XX:+PreserveFramePointer), so that the stack of a
// Node.js or Java thread, JIT frames between frames with tables, is walked
// whole.

// TableLoader is implemented by a Source whose sampler walks user stacks
// over unwind tables in the kernel.
type TableLoader interface {
	// ConvertTable converts a binary's table into the kernel walk's
	// form.
	ConvertTable(t *sframe.Table) (KernelTable, error)
	// ParseTable decodes a KernelTable's encoding, checking it as
	// untrusted input.
	ParseTable(b []byte) (KernelTable, error)
	// LoadTable loads the table of a binary, named id from then on. To
	// make room it may evict others, which Evicted then returns.
	LoadTable(id uint64, t KernelTable) error
	// Evicted returns the tables evicted since the last call: the
	// mappings that named them are no longer walked.
	Evicted() []uint64
	// MapTable says pid maps the code of table id at [start, end), at
	// bias from the binary's addresses.
	MapTable(pid uint32, id uint64, start, end, bias uint64) error
	// MapFramePointers says pid maps code keeping frame pointers at
	// [start, end).
	MapFramePointers(pid uint32, start, end uint64) error
	// MapJIT says pid has executable memory of no file at [start, end),
	// code a JIT compiler wrote, which the walk may take to keep frame
	// pointers.
	MapJIT(pid uint32, start, end uint64) error
	// MapProcess says pid's mappings have all been described (those
	// that could be), until UnmapPid.
	MapProcess(pid uint32) error
	// UnmapPid forgets every mapping of pid.
	UnmapPid(pid uint32)
	// TableStats says how the kernel's tables and walks fare, for
	// UnwindStats.
	TableStats() (KernelTableStats, error)
}

// KernelTable is a binary's table in the kernel walk's form
// (bpf.UnwindTable), which the unwind store keeps beside the table
// (KernelForm).
type KernelTable interface {
	MarshalBinary() ([]byte, error)
}

// KernelForm names the kernel walk's form of a table in the unwind store
// (unwind.Store.SaveDerived). A process whose binary's table was loaded by
// an earlier run gets it from there at once: reading libLLVM's table and
// converting it took 150-400 ms on a 2-vCPU host beside a compile, during
// which the compile's samples stopped at its frames; reading the
// converted form takes a tenth of that (bpf.BenchmarkParseUnwindTable).
const KernelForm = "bpf"

// KernelTableStats is the kernel's account of its unwind tables: those
// loaded and their rows, the bytes they use of the budget, the tables
// evicted for others and refused for want of room, the process mappings
// refused, and the walks by how they ended ("outermost frame" is a whole
// stack).
type KernelTableStats struct {
	Loaded, Rows                      int
	Used, Budget                      int64
	Evicted, Refused, MappingsRefused uint64
	Walks                             map[string]uint64
}

// kernelTables is what the unwinder told the kernel.
type kernelTables struct {
	loader TableLoader
	nextID uint64
	// mapped holds, per process, the mappings described, by start:
	// those of an evicted table wait for it again as they were
	// described, whatever mapSet the process has now; sets the mapSet
	// last examined.
	mapped map[uint32]map[uint64]mapping
	sets   map[uint32]*mapSet
	// waiting holds the mappings whose binary's table is not loaded:
	// not built yet, or evicted by the kernel for others; eager asks for
	// the build as soon as a mapping waits.
	waiting map[*unwindInfo][]kernelWait
	eager   bool
	// loaded holds the binaries whose tables are loaded, by table id.
	loaded map[uint64]*unwindInfo
}

type kernelWait struct {
	pid uint32
	m   mapping
}

// attachKernel starts describing mappings to src, if it loads tables,
// beginning with the processes known now.
func (c *Collector) attachKernel(src Source) {
	u := c.unw
	l, ok := src.(TableLoader)
	if u == nil || !c.kernelTables || u.kt != nil || !ok {
		return
	}
	u.kt = &kernelTables{loader: l, mapped: map[uint32]map[uint64]mapping{}, sets: map[uint32]*mapSet{},
		waiting: map[*unwindInfo][]kernelWait{}, eager: c.table.follow != nil, loaded: map[uint64]*unwindInfo{}}
	for pid, img := range c.table.byPid {
		if img.exited == 0 {
			u.kernelSet(pid, img.maps)
		}
	}
}

// kernelSet describes the mappings of set, pid's, to the kernel.
func (u *unwinder) kernelSet(pid uint32, set *mapSet) {
	kt := u.kt
	if kt == nil || kt.sets[pid] == set {
		return
	}
	kt.sets[pid] = set
	for _, d := range kt.mapped[pid] {
		if !set.has(d) {
			kt.loader.UnmapPid(pid)
			delete(kt.mapped, pid)
			break
		}
	}
	for i := range set.maps {
		u.kernelMap(pid, &set.maps[i])
	}
	for _, r := range set.anon {
		u.kernelMapJIT(pid, r)
	}
	if err := kt.loader.MapProcess(pid); err != nil {
		u.kernelError(err)
	}
}

// kernelMap describes one mapping of pid to the kernel, or asks for its
// table and describes it once the table is loaded.
func (u *unwinder) kernelMap(pid uint32, m *mapping) {
	kt := u.kt
	if kt == nil || m.bin.name[0] == '[' || kt.mapped[pid][m.start].bin == m.bin {
		return
	}
	in := u.info(m)
	u.classify(in, pid, m)
	if !in.readable {
		return
	}
	var err error
	switch {
	case in.framePointers:
		err = kt.loader.MapFramePointers(pid, m.start, m.limit)
	case in.kernelID != 0 || kt.eager && u.kernelStored(in):
		err = kt.loader.MapTable(pid, in.kernelID, m.start, m.limit, in.bias(m))
	case in.built && in.table == nil || in.kernelErr != nil:
		return // no table, or the kernel refused it: the copy, if any, stays the way
	default:
		// Being built, or evicted from the kernel and kept here: a
		// sample that needs it has it loaded again (kernelDemand).
		if kt.eager {
			u.ensureTable(in, pid, m)
		}
		u.kernelWait(in, pid, m)
		return
	}
	if err != nil {
		u.kernelError(err)
		return
	}
	if kt.mapped[pid] == nil {
		kt.mapped[pid] = map[uint64]mapping{}
	}
	kt.mapped[pid][m.start] = *m
}

// kernelMapJIT describes pid's executable memory of no file r to the
// kernel, once; kt.mapped keeps it as a mapping of no binary.
func (u *unwinder) kernelMapJIT(pid uint32, r codeRange) {
	kt := u.kt
	if kt == nil || kt.sets[pid] == nil {
		return // not described yet: kernelSet describes it whole
	}
	if d, ok := kt.mapped[pid][r.start]; ok && d.bin == nil && d.limit == r.limit {
		return
	}
	if err := kt.loader.MapJIT(pid, r.start, r.limit); err != nil {
		u.kernelError(err)
		return
	}
	if kt.mapped[pid] == nil {
		kt.mapped[pid] = map[uint64]mapping{}
	}
	kt.mapped[pid][r.start] = mapping{start: r.start, limit: r.limit}
}

// kernelWait has pid's mapping m wait for in's table, once: a process's
// mappings are examined again with each of its mapSets.
func (u *unwinder) kernelWait(in *unwindInfo, pid uint32, m *mapping) {
	w := kernelWait{pid, *m}
	if !slices.Contains(u.kt.waiting[in], w) {
		u.kt.waiting[in] = append(u.kt.waiting[in], w)
	}
}

// kernelLoad loads t, in's table just built (nil: none could be), and
// describes the mappings that waited for it.
func (u *unwinder) kernelLoad(in *unwindInfo, t *sframe.Table) {
	kt := u.kt
	if kt == nil {
		return
	}
	if t != nil && in.kernelID == 0 && in.kernelErr == nil {
		k, err := kt.loader.ConvertTable(t)
		if err == nil {
			u.kernelLoadConverted(in, k)
		} else {
			in.kernelErr = fmt.Errorf("%s: %w", in.name, err)
			u.kernelError(in.kernelErr)
		}
		if in.kernelID != 0 && u.store != nil && in.buildID != "" && !in.kernelSaved {
			// After the load: the walks need not wait for the write.
			in.kernelSaved = true
			b, err := k.MarshalBinary()
			if err == nil {
				err = u.store.SaveDerived(in.buildID, in.hasSFrame, KernelForm, b)
			}
			if err != nil {
				u.storeError(err)
			}
		}
	}
	u.kernelWaited(in)
}

// kernelLoadConverted loads k, in's table converted, into the kernel.
func (u *unwinder) kernelLoadConverted(in *unwindInfo, k KernelTable) {
	kt := u.kt
	kt.nextID++
	if err := kt.loader.LoadTable(kt.nextID, k); err != nil {
		in.kernelErr = fmt.Errorf("%s: %w", in.name, err)
		u.kernelError(in.kernelErr)
	} else {
		in.kernelID = kt.nextID
		kt.loaded[in.kernelID] = in
		u.stats.KernelTables++
	}
	// The sampler evicts to make room before it writes the table: a load
	// refused then has evicted tables too.
	u.kernelEvicted()
}

// kernelWaited describes the mappings that waited for in's table, once it
// is loaded.
func (u *unwinder) kernelWaited(in *unwindInfo) {
	kt := u.kt
	waits := kt.waiting[in]
	delete(kt.waiting, in)
	for _, w := range waits {
		if kt.sets[w.pid] != nil && in.kernelID != 0 {
			u.kernelMap(w.pid, &w.m)
		}
	}
}

// kernelStored loads in's table into the kernel from the form an earlier
// run kept in the store (KernelForm), if there is one, without waiting
// for the table itself to be read and converted; it reports whether the
// table is loaded. A table evicted from the kernel is looked for there
// again.
func (u *unwinder) kernelStored(in *unwindInfo) bool {
	if u.store == nil || in.buildID == "" || in.kernelID != 0 || in.kernelErr != nil || in.kernelLooked {
		return in.kernelID != 0
	}
	in.kernelLooked = true
	b, err := u.store.LoadDerived(in.buildID, in.hasSFrame, KernelForm)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			u.storeError(err)
		}
		return false
	}
	k, err := u.kt.loader.ParseTable(b)
	if err != nil {
		u.storeError(fmt.Errorf("%s: stored kernel table: %w", in.name, err))
		return false
	}
	in.kernelSaved = true // there: not saved again
	u.kernelLoadConverted(in, k)
	if in.kernelID == 0 {
		return false
	}
	u.stats.KernelStored++
	u.kernelWaited(in)
	return true
}

// kernelEvicted forgets the tables the kernel evicted: their binaries'
// mappings wait for the table to be loaded again, which a sample whose
// walk ends in one of them asks for (kernelDemand). The kernel evicts
// the tables its walks used least recently.
func (u *unwinder) kernelEvicted() {
	kt := u.kt
	for _, id := range kt.loader.Evicted() {
		in := kt.loaded[id]
		delete(kt.loaded, id)
		if in == nil || in.kernelID != id {
			continue
		}
		in.kernelID, in.kernelLooked = 0, false
		for pid, mapped := range kt.mapped {
			for start, m := range mapped {
				if u.byFile[m.bin] == in {
					delete(mapped, start)
					u.kernelWait(in, pid, &m)
				}
			}
		}
	}
}

// storeError counts an error of the unwind store: a stored form damaged
// (then rebuilt), or one that could not be written.
func (u *unwinder) storeError(err error) {
	u.stats.StoreErrors++
	if u.stats.StoreErr == nil {
		u.stats.StoreErr = err
	}
}

func (u *unwinder) kernelError(err error) {
	u.stats.KernelErrors++
	if u.stats.KernelErr == nil {
		u.stats.KernelErr = err
	}
}

// kernelExited forgets the mappings of a process that exited.
func (u *unwinder) kernelExited(pid uint32) {
	kt := u.kt
	if kt == nil {
		return
	}
	if kt.mapped[pid] != nil {
		kt.loader.UnmapPid(pid)
	}
	delete(kt.mapped, pid)
	delete(kt.sets, pid)
}

// countKernel counts a sample whose user stack the kernel walked over
// tables.
func (u *unwinder) countKernel(truncated bool) {
	if truncated {
		u.stats.KernelPartial++
	} else {
		u.stats.KernelWhole++
	}
}

// kernelDemand asks for the tables a sample the kernel did not walk whole
// lacked, so that later ones are: those of its leaf's binary and of the
// binary where its walk ended (checking every frame would cost every such
// sample a search per frame).
func (u *unwinder) kernelDemand(pid uint32, set *mapSet, user []uint64) {
	if u.kt == nil || len(user) == 0 {
		return
	}
	for i, pc := range []uint64{user[0], user[len(user)-1] - 1} {
		if i > 0 && len(user) == 1 {
			break
		}
		m := set.find(pc)
		if m == nil || m.bin.name[0] == '[' {
			continue
		}
		in := u.info(m)
		if in.kernelID != 0 || in.kernelErr != nil {
			continue
		}
		u.classify(in, pid, m)
		switch {
		case in.framePointers || !in.readable:
		case u.kernelStored(in): // whether or not a stack copy asked for the table already
		case in.building:
		case in.table != nil:
			// Evicted from the kernel, still here: load it again.
			if u.kernelLoad(in, in.table); in.kernelID != 0 {
				u.stats.KernelReloaded++
			}
		case !in.built:
			u.ensureTable(in, pid, m)
		}
	}
}
