package bpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Kernel memory for unwind tables.
//
// Config.UnwindTables bytes are split between the three arrays the walk
// reads: 7/8 for rows (8 bytes each), 1/16 for the page index (an entry
// per 4 KiB of code) and 1/16 for rules, each entry taking what the kernel
// gives it (rowEntryBytes and the others). The arrays are
// preallocated, so the budget is what the kernel holds from Open on,
// whatever is loaded. Each table takes a contiguous range of each array
// (first fit); when one does not fit, the tables the walk used least
// recently (unwind_table.used, written by the walk about once a second)
// are evicted until it does, and a table larger than the space is
// refused. Both are counted in TableStats.

// DefaultUnwindTables is the default kernel memory for unwind tables:
// 3.6 million rows, enough for libLLVM (1.2 million), libclang-cpp, libc,
// python and a JVM's libjvm together.
const DefaultUnwindTables = 32 << 20

const (
	maxTables       = 4096    // slots of unwind_tables
	maxMapEntries   = 1 << 18 // prefixes in unwind_maps
	minUnwindTables = 1 << 20
	// maxUnwindTables keeps every array's index within 32 bits.
	maxUnwindTables = 16 << 30
)

// ErrTableSpace says an unwind table is larger than the whole space for
// tables (Config.UnwindTables).
var ErrTableSpace = errors.New("unwind table larger than the space for tables")

// TableID names a table loaded into the Sampler's maps.
type TableID struct {
	slot, gen uint32
	base      uint64 // UnwindTable.Base
}

// TableStats says how the tables' kernel memory fares, and how the table
// walks ended.
type TableStats struct {
	Loaded         int    // tables loaded now
	Rows           int    // their rows
	Budget         int64  // bytes of kernel memory for tables
	Used           int64  // bytes used by the tables loaded
	Evicted        uint64 // tables evicted to make room for others
	Refused        uint64 // tables that did not fit at all
	MappingsFailed uint64 // process mappings the lookup map had no room for
	// Walks counts the table walks by how they ended (TableStop).
	Walks [NumTableStops]uint64
}

// TableStop is how a table walk ended (enum table_stop).
type TableStop uint8

// Ends of a table walk.
const (
	TableOutermost   TableStop = 1 + iota // the whole stack
	TableNoMapping                        // the pc is in no mapping with a table
	TableNoRule                           // the table has no row for the pc, or was evicted
	TableUnsupported                      // a rule the walk cannot apply
	TableFault                            // a read of the stack faulted
	TableBadFrame                         // the CFA did not increase, or a return address is no code address
	TableDepth                            // the depth limit
	TableFPLeaf                           // the topmost frame keeps frame pointers: the frame-pointer walk took over
	NumTableStops
)

var tableStopNames = [...]string{
	TableOutermost:   "outermost frame",
	TableNoMapping:   "no table for pc",
	TableNoRule:      "no rule for pc",
	TableUnsupported: "unsupported rule",
	TableFault:       "read fault",
	TableBadFrame:    "bad frame",
	TableDepth:       "depth limit",
	TableFPLeaf:      "frame pointers at the leaf",
}

func (s TableStop) String() string {
	if int(s) < len(tableStopNames) && tableStopNames[s] != "" {
		return tableStopNames[s]
	}
	return fmt.Sprintf("TableStop(%d)", uint8(s))
}

// span is a range of an array's entries.
type span struct{ off, n uint32 }

// arena allocates ranges of one array, first fit.
type arena struct {
	size uint32
	used []span // sorted by off
}

func (a *arena) alloc(n uint32) (uint32, bool) {
	at := uint32(0)
	for i, s := range a.used {
		if s.off-at >= n {
			a.used = slices.Insert(a.used, i, span{at, n})
			return at, true
		}
		at = s.off + s.n
	}
	if a.size-at < n {
		return 0, false
	}
	a.used = append(a.used, span{at, n})
	return at, true
}

func (a *arena) free(off uint32) {
	a.used = slices.DeleteFunc(a.used, func(s span) bool { return s.off == off })
}

// loadedTable is a table in its slot.
type loadedTable struct {
	rows, pages, rules span
	size               int64
	seq                uint64 // load order, for eviction among unused tables
}

// tableSpace manages the table maps: which slots and ranges hold which
// table, and the prefixes each process's mappings took in unwind_maps.
type tableSpace struct {
	mu                 sync.Mutex
	objs               *objects
	rows, pages, rules arena
	// written orders a table's writes before the update of its slot
	// (atomic read-modify-write: a barrier on arm64 as well).
	written atomic.Uint64
	slots   [maxTables]*loadedTable
	gens    [maxTables]uint32
	seq     uint64
	keys    map[uint32][]unwindKey // per pid
	nkeys   int
	epoch   uint32 // unwind_epoch's value
	stats   TableStats
}

// The kernel memory an entry of each array takes: an array map keeps each
// value at a multiple of 8 bytes, so a page index entry (4 bytes) takes 8
// and a rule (12) 16.
const (
	rowEntryBytes  = 8
	pageEntryBytes = 8
	ruleEntryBytes = 16
)

// tableSizes splits a budget of bytes into the arrays' entries.
func tableSizes(budget int64) (rows, pages, rules uint32) {
	return uint32(budget * 7 / 8 / rowEntryBytes), uint32(budget / 16 / pageEntryBytes), uint32(budget / 16 / ruleEntryBytes)
}

func newTableSpace(objs *objects, budget int64) *tableSpace {
	rows, pages, rules := tableSizes(budget)
	return &tableSpace{objs: objs, rows: arena{size: rows}, pages: arena{size: pages}, rules: arena{size: rules},
		keys: map[uint32][]unwindKey{}, stats: TableStats{Budget: budget}}
}

// LoadTable puts t into the table maps, evicting the least recently used
// tables if there is no room, and returns its id for MapTable. Errors wrap
// ErrTableSpace when t is larger than the space itself, and
// ErrNoTables without Config.UnwindTables.
func (s *Sampler) LoadTable(t *UnwindTable) (TableID, error) {
	ts := s.tables
	if ts == nil {
		return TableID{}, ErrNoTables
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	nrows, npages, nrules := uint32(len(t.rows)), uint32(len(t.pages)), uint32(len(t.rules))
	if nrows > ts.rows.size || npages > ts.pages.size || nrules > ts.rules.size {
		ts.stats.Refused++
		return TableID{}, fmt.Errorf("%w: %d rows, %d page entries, %d rules", ErrTableSpace, nrows, npages, nrules)
	}
	var lt loadedTable
	slot := -1
	for {
		if slot < 0 {
			slot = slices.Index(ts.slots[:], nil)
		}
		if slot >= 0 {
			if lt.rows.n == 0 {
				if off, ok := ts.rows.alloc(nrows); ok {
					lt.rows = span{off, nrows}
				}
			}
			if lt.pages.n == 0 && lt.rows.n != 0 {
				if off, ok := ts.pages.alloc(npages); ok {
					lt.pages = span{off, npages}
				}
			}
			if lt.rules.n == 0 && lt.pages.n != 0 {
				if off, ok := ts.rules.alloc(nrules); ok {
					lt.rules = span{off, nrules}
				}
			}
			if lt.rules.n != 0 {
				break
			}
		}
		if !ts.evictOne() {
			ts.release(&lt)
			ts.stats.Refused++
			return TableID{}, fmt.Errorf("%w: no room left after evicting every table", ErrTableSpace)
		}
	}
	if err := ts.write(t, &lt); err != nil {
		ts.release(&lt)
		return TableID{}, err
	}
	ts.gens[slot]++
	gen := ts.gens[slot]
	ts.seq++
	lt.seq, lt.size = ts.seq, t.Size()
	slotv := unwindTableSlot{PageBase: lt.pages.off, NPages: t.npages(), Gen: gen}
	if err := ts.objs.UnwindTables.Update(uint32(slot), &slotv, ebpf.UpdateAny); err != nil {
		ts.release(&lt)
		return TableID{}, fmt.Errorf("load unwind table: %w", err)
	}
	ts.slots[slot] = &lt
	ts.stats.Loaded++
	ts.stats.Rows += int(nrows)
	ts.stats.Used += lt.size
	return TableID{uint32(slot), gen, t.Base}, nil
}

// write copies t into the ranges of lt, rebased onto them.
func (ts *tableSpace) write(t *UnwindTable, lt *loadedTable) error {
	rows := make([]unwindRow, len(t.rows))
	for i, r := range t.rows {
		rows[i] = unwindRow{PC: r.PC, Rule: r.Rule + lt.rules.off}
	}
	pages := make([]uint32, len(t.pages))
	for i, p := range t.pages {
		pages[i] = p + lt.rows.off
	}
	err := errors.Join(writeArray(ts.objs.UnwindRows, lt.rows.off, rows), writeArray(ts.objs.UnwindPages, lt.pages.off, pages),
		writeArray(ts.objs.UnwindRules, lt.rules.off, t.rules))
	ts.written.Add(1)
	if err != nil {
		return fmt.Errorf("load unwind table: %w", err)
	}
	return nil
}

// writeArray copies vs into m, an array map created BPF_F_MMAPABLE, from
// index at on, each value in its native layout at a multiple of 8 bytes
// as the kernel keeps them. It maps the pages the values fall in for the
// copy and unmaps them after it. An update per element (BatchUpdate)
// took 330-600 ms for libclang-cpp's million rows in sprof record on
// sprof's CI VM, while walks stopped at the library's frames; on its own
// (BenchmarkLoadTable), 115-135 ms for libLLVM's 1.3 million rows, where
// the copy takes 35-90 ms, mapping included. A mapping kept for the
// Sampler's life would make the copy 15-30 ms, but count the whole array
// (32 MiB by default) in sprof's RSS, as the kernel maps all of an
// array's pages at once, and keep the map alive after Close.
func writeArray[T any](m *ebpf.Map, at uint32, vs []T) error {
	if len(vs) == 0 {
		return nil
	}
	size, stride := int(unsafe.Sizeof(vs[0])), (int(m.ValueSize())+7)&^7
	if size > int(m.ValueSize()) || uint64(at)+uint64(len(vs)) > uint64(m.MaxEntries()) {
		return fmt.Errorf("%d values of %d bytes at index %d: past %s's %d entries of %d bytes", len(vs), size, at, m, m.MaxEntries(), m.ValueSize())
	}
	page := os.Getpagesize()
	from := int(at) * stride
	base := from &^ (page - 1)
	b, err := unix.Mmap(m.FD(), int64(base), (from+len(vs)*stride-base+page-1)&^(page-1), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("map %s into memory at index %d: %w", m, at, err)
	}
	src := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(vs))), len(vs)*size)
	dst := b[from-base:]
	if size == stride {
		copy(dst, src)
	} else {
		for i := range vs {
			copy(dst[i*stride:], src[i*size:(i+1)*size])
		}
	}
	if err := unix.Munmap(b); err != nil {
		return fmt.Errorf("unmap %s: %w", m, err)
	}
	return nil
}

func (ts *tableSpace) release(lt *loadedTable) {
	for _, r := range []struct {
		a *arena
		s span
	}{{&ts.rows, lt.rows}, {&ts.pages, lt.pages}, {&ts.rules, lt.rules}} {
		if r.s.n != 0 {
			r.a.free(r.s.off)
		}
	}
}

// evictOne drops the table the walk used least recently (the one loaded
// first among those never used), and reports whether there was one.
func (ts *tableSpace) evictOne() bool {
	victim, vused, vseq := -1, uint64(0), uint64(0)
	for i, lt := range ts.slots {
		if lt == nil {
			continue
		}
		var v unwindTableSlot
		if err := ts.objs.UnwindTables.Lookup(uint32(i), &v); err != nil {
			continue
		}
		if victim < 0 || v.Used < vused || v.Used == vused && lt.seq < vseq {
			victim, vused, vseq = i, v.Used, lt.seq
		}
	}
	if victim < 0 {
		return false
	}
	ts.drop(victim)
	ts.stats.Evicted++
	return true
}

// drop frees a slot; mappings that still name it find a newer generation
// or none, and the walk stops there.
func (ts *tableSpace) drop(slot int) {
	lt := ts.slots[slot]
	ts.objs.UnwindTables.Update(uint32(slot), &unwindTableSlot{}, ebpf.UpdateAny)
	ts.release(lt)
	ts.slots[slot] = nil
	ts.stats.Loaded--
	ts.stats.Rows -= int(lt.rows.n)
	ts.stats.Used -= lt.size
}

// TableLoaded reports whether id is still loaded: LoadTable evicts the
// tables used least recently to make room for others.
func (s *Sampler) TableLoaded(id TableID) bool {
	ts := s.tables
	if ts == nil || int(id.slot) >= maxTables {
		return false
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.slots[id.slot] != nil && ts.gens[id.slot] == id.gen
}

// DropTable unloads a table, e.g. once no process maps its binary.
func (s *Sampler) DropTable(id TableID) {
	ts := s.tables
	if ts == nil || int(id.slot) >= maxTables {
		return
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.slots[id.slot] != nil && ts.gens[id.slot] == id.gen {
		ts.drop(int(id.slot))
	}
}

// MapTable says that pid maps the code of table id at [start, end), with
// bias added to the binary's addresses (the load address of a PIE).
func (s *Sampler) MapTable(pid uint32, start, end, bias uint64, id TableID) error {
	return s.mapRange(pid, start, end, unwindMapping{Start: start, End: end, Base: bias + id.base,
		Table: id.slot, Kind: mappingTable, Gen: id.gen})
}

// MapFramePointers says that pid maps code that keeps frame pointers at
// [start, end): the table walk goes on there by the frame-pointer rule.
func (s *Sampler) MapFramePointers(pid uint32, start, end uint64) error {
	return s.mapRange(pid, start, end, unwindMapping{Start: start, End: end, Kind: mappingFramePointers})
}

// MapJIT says that pid has executable memory of no file at [start, end):
// code a JIT compiler wrote. The table walk goes on there by the
// frame-pointer rule, checked as the frame-pointer walk checks its records
// (V8 keeps frame records; HotSpot does with -XX:+PreserveFramePointer),
// on kernels with bpf_loop (5.17); before, a walk ends there as in code it
// has no table for.
func (s *Sampler) MapJIT(pid uint32, start, end uint64) error {
	// A walk that does not take the rule looks for a table: there is
	// none in slot maxTables.
	return s.mapRange(pid, start, end, unwindMapping{Start: start, End: end, Kind: mappingJIT, Table: maxTables})
}

// MapProcess says that pid's mappings have been described (MapTable and
// MapFramePointers for those that have tables or frame pointers): a walk
// that finds no mapping for a pc of pid's then knows there is none,
// rather than taking pid for a process not described yet, for which it
// wakes the reader at once (at most every 10 ms) so that it is described
// soon. Until UnmapPid.
func (s *Sampler) MapProcess(pid uint32) error {
	ts := s.tables
	if ts == nil {
		return ErrNoTables
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	// The pid alone, as a 32-bit prefix: the longest prefix that matches
	// a pc no mapping covers. It covers no pcs itself (start = end = 0),
	// so the mappings the walk remembers stay valid without an epoch.
	k := unwindKey{PrefixLen: 32, Pid: bswap32(pid)}
	if slices.Contains(ts.keys[pid], k) {
		return nil
	}
	if ts.nkeys >= maxMapEntries {
		ts.stats.MappingsFailed++
		return fmt.Errorf("describe pid %d: %d prefixes in the lookup map already", pid, ts.nkeys)
	}
	if err := ts.objs.UnwindMaps.Update(&k, &unwindMapping{Kind: mappingProcess}, ebpf.UpdateAny); err != nil {
		ts.stats.MappingsFailed++
		return fmt.Errorf("describe pid %d: %w", pid, err)
	}
	ts.keys[pid] = append(ts.keys[pid], k)
	ts.nkeys++
	return nil
}

// mapRange maps [start, end) of pid to v for the table walk.
func (s *Sampler) mapRange(pid uint32, start, end uint64, v unwindMapping) error {
	ts := s.tables
	if ts == nil {
		return ErrNoTables
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if err := ts.changeMaps(func() error { return ts.putRange(pid, start, end, v) }); err != nil {
		return fmt.Errorf("map pid %d [%#x, %#x): %w", pid, start, end, err)
	}
	return nil
}

// changeMaps runs change, which writes unwind_maps, and then bumps
// unwind_epoch, which the program's memory of the mappings it found
// (find_mapping) must match: what change replaced or removed is found no
// more. Called with mu held.
func (ts *tableSpace) changeMaps(change func() error) error {
	err := change()
	ts.epoch++
	if ts.epoch == 0 { // 0 is the program's empty slot
		ts.epoch = 1
	}
	if e := ts.objs.UnwindEpoch.Update(uint32(0), ts.epoch, ebpf.UpdateAny); e != nil {
		err = errors.Join(err, fmt.Errorf("unwind_epoch: %w", e))
	}
	return err
}

// putRange puts [start, end) of pid into unwind_maps as the aligned
// power-of-two blocks that cover it, each an LPM prefix.
func (ts *tableSpace) putRange(pid uint32, start, end uint64, v unwindMapping) error {
	for at := start; at < end; {
		size := uint64(1) << min(bits.TrailingZeros64(at), 63)
		for at+size > end || at+size < at {
			size >>= 1
		}
		if ts.nkeys >= maxMapEntries {
			ts.stats.MappingsFailed++
			return fmt.Errorf("%d prefixes in the lookup map already", ts.nkeys)
		}
		k := unwindKey{PrefixLen: 32 + 64 - uint32(bits.TrailingZeros64(size)),
			Pid: bswap32(pid), PC: bswap64(at)}
		if err := ts.objs.UnwindMaps.Update(&k, &v, ebpf.UpdateAny); err != nil {
			ts.stats.MappingsFailed++
			return err
		}
		ts.keys[pid] = append(ts.keys[pid], k)
		ts.nkeys++
		at += size
	}
	return nil
}

// UnmapPid removes every mapping of pid from the table walk's lookup (the
// process exited or execed).
func (s *Sampler) UnmapPid(pid uint32) {
	ts := s.tables
	if ts == nil {
		return
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	// No error to report, as ever: deleting a key the map holds and
	// writing an array's one entry fail only for want of memory.
	ts.changeMaps(func() error {
		for _, k := range ts.keys[pid] {
			ts.objs.UnwindMaps.Delete(&k)
		}
		return nil
	})
	ts.nkeys -= len(ts.keys[pid])
	delete(ts.keys, pid)
}

// TableStats returns the tables' memory and the table walks' ends so far.
func (s *Sampler) TableStats() (TableStats, error) {
	ts := s.tables
	if ts == nil {
		return TableStats{}, ErrNoTables
	}
	ts.mu.Lock()
	st := ts.stats
	ts.mu.Unlock()
	for i := range st.Walks {
		var perCPU []uint64
		if err := s.objs.TableStops.Lookup(uint32(i), &perCPU); err != nil {
			return st, fmt.Errorf("read table walk counters: %w", err)
		}
		for _, n := range perCPU {
			st.Walks[i] += n
		}
	}
	return st, nil
}

// bswap32 and bswap64 return the value whose bytes in memory are x's in
// big-endian order: LPM trie keys compare bytes, most significant first.
func bswap32(x uint32) uint32 {
	return binary.NativeEndian.Uint32(binary.BigEndian.AppendUint32(nil, x))
}
func bswap64(x uint64) uint64 {
	return binary.NativeEndian.Uint64(binary.BigEndian.AppendUint64(nil, x))
}
