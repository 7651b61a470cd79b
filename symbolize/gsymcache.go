package symbolize

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/sprof/sprof/internal/elfx"
	"github.com/sprof/sprof/stacks"
	"github.com/sprof/sprof/symbolize/buildid"
	"github.com/sprof/sprof/symbolize/debugfile"
	"github.com/sprof/sprof/symbolize/debuginfod"
	"github.com/sprof/sprof/symbolize/gsym"
	"github.com/sprof/sprof/symbolize/gsym/convert"
)

// GSYMOptions configure a GSYM symbolizer.
type GSYMOptions struct {
	// Options configure the ELF symbolizer that answers what the GSYM
	// files lack, and the debug directories conversions search.
	Options
	// CacheDir holds the converted files; "" means DefaultCacheDir().
	CacheDir string
	// Debuginfod, when set, fetches the debug files of binaries that
	// have none on disk (see debuginfod.FromEnv). Its Dir defaults to
	// CacheDir/debuginfod, which both symbolizers then search as a debug
	// directory.
	Debuginfod *debuginfod.Client
	// Warnings, when set, is told in a line of what the symbolizer
	// repaired: a damaged cache file, converted again.
	Warnings io.Writer
}

// GSYMStats counts the work of a GSYM symbolizer's file cache.
type GSYMStats struct {
	// Converted counts binaries converted to GSYM by this symbolizer;
	// Reused counts GSYM files found already converted in the cache
	// directory; Failed counts binaries that gave no GSYM (no functions,
	// or a malformed file) and are symbolized by the ELF symbolizer alone.
	Converted, Reused, Failed uint64
}

// GSYM symbolizes user-space binaries from GSYM files it converts once per
// binary and keeps on disk, keyed by build ID, so that a profiler started
// again on the same host maps a file instead of parsing DWARF again.
//
// Conversion is synchronous: the first lookup in a binary converts it
// (concurrent lookups in the same binary wait for that one conversion) and
// every lookup returns what GSYM says. Converting in the background while
// the ELF symbolizer answered would make the first profile of a host differ
// from the later ones, and the ELF symbolizer reads the same DWARF a
// conversion reads, so answering meanwhile would parse it twice. The
// price is paid once per binary per host: for libc with its debug file
// (BenchmarkGSYMFirstLookup, 2 cores) converting costs 0.7-0.9 s against
// the ELF symbolizer's 0.4 s load, and every later run maps the file in
// 1.2 ms.
//
// Binaries without a GSYM file, and addresses a GSYM file does not cover,
// are answered by an ELF symbolizer from symbol tables (.dynsym,
// MiniDebugInfo, symbols without a size) and Go pclntabs alone: the
// conversion read all the DWARF there is, so reading it again could add
// nothing, for seconds of CPU and tens of megabytes. Addresses a GSYM
// covers without a line in Go programs without DWARF are answered by their
// pclntab, which GSYM does not hold. A GSYM is safe for concurrent use.
type GSYM struct {
	dir      string
	opts     GSYMOptions
	local    []string // debug directories on disk
	dirs     []string // and the one debuginfod fills
	fetcher  *debuginfod.Client
	fallback *ELF
	tables   *cache[*gsymTable]
	results  sync.Pool // of *gsym.LookupResult

	// front is the tables the cache holds, by key, in a map that is
	// replaced, never changed: the warm path reads it without a lock
	// (the cache's mutex cost a fifth of a warm lookup). It is rebuilt
	// after every load and sweep, the only times the cache adds or
	// evicts tables. epoch counts the loads and sweeps; a table found in
	// front is touched in the cache's LRU order once per epoch, which is
	// all the order eviction (only ever at a load) and the sweeps' marks
	// of use need.
	front   atomic.Pointer[map[string]*gsymTable]
	frontMu sync.Mutex // serializes rebuilds
	epoch   atomic.Uint64
	hits    atomic.Uint64 // lookups found in front without touching the cache

	namesMu sync.RWMutex
	names   map[fileVersion]string // cache names of binaries without build ID

	converted, reused, failed atomic.Uint64

	// ctx ends the debuginfod fetches and conversions under way, and
	// keeps new ones from starting, once Close cancels it.
	ctx    context.Context
	cancel context.CancelFunc
}

// DefaultCacheDir is where converted files are kept: /var/cache/sprof for
// root, else $XDG_CACHE_HOME/sprof, else ~/.cache/sprof.
func DefaultCacheDir() (string, error) {
	if os.Geteuid() == 0 {
		return "/var/cache/sprof", nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("cache directory: %w", err)
	}
	return filepath.Join(d, "sprof"), nil
}

// NewGSYM returns a GSYM symbolizer whose files live in opts.CacheDir, which
// it creates. opts.CacheBytes bounds the GSYM files and the ELF
// symbolizer's tables together: each gets half.
func NewGSYM(opts GSYMOptions) (*GSYM, error) {
	if opts.CacheDir == "" {
		d, err := DefaultCacheDir()
		if err != nil {
			return nil, err
		}
		opts.CacheDir = d
	}
	dir := filepath.Join(opts.CacheDir, "gsym")
	// Private: the files name the functions of every binary profiled,
	// root-only ones included.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("gsym cache: %w", err)
	}
	removeStale(dir)
	local := opts.DebugDirs
	if local == nil {
		local = []string{debugfile.DefaultDir}
	}
	dirs := local
	var fetcher *debuginfod.Client
	if opts.Debuginfod != nil {
		c := *opts.Debuginfod
		if c.Dir == "" {
			c.Dir = filepath.Join(opts.CacheDir, "debuginfod")
		}
		fetcher, dirs = &c, append(slices.Clone(local), c.Dir)
	}
	budget := opts.CacheBytes
	if budget <= 0 {
		budget = DefaultCacheBytes
	}
	elfOpts := opts.Options
	elfOpts.DebugDirs = dirs
	elfOpts.CacheBytes = max(budget/2, 1)
	fallback := NewELF(elfOpts)
	fallback.noDWARF = true
	ctx, cancel := context.WithCancel(context.Background())
	return &GSYM{
		ctx:      ctx,
		cancel:   cancel,
		dir:      dir,
		opts:     opts,
		local:    local,
		dirs:     dirs,
		fetcher:  fetcher,
		fallback: fallback,
		tables:   newCache[*gsymTable](max(budget-budget/2, 1)),
		names:    map[fileVersion]string{},
		results:  sync.Pool{New: func() any { return new(gsym.LookupResult) }},
	}, nil
}

var _ Symbolizer = (*GSYM)(nil)

// Close stops the debuginfod fetch and the conversion under way and
// keeps new ones from starting: the binaries they were for stay unnamed
// (their lookups fail), while GSYM files converted already still answer.
// A Pipeline closes its Symbolizer when it stops; a second Ctrl-C at the
// end of a recording does too, so that it ends at once.
func (s *GSYM) Close() error {
	s.cancel()
	return nil
}

// Stats reports the conversions and cache reuses so far.
func (s *GSYM) Stats() GSYMStats {
	return GSYMStats{Converted: s.converted.Load(), Reused: s.reused.Load(), Failed: s.failed.Load()}
}

// CacheStats reports the work of the caches of GSYM files and of the ELF
// symbolizer's tables, summed: Bytes, within GSYMOptions.CacheBytes, is
// their estimated memory (see gsymTable.cost); each GSYM miss maps or
// converts one file.
func (s *GSYM) CacheStats() CacheStats {
	g, e := s.tables.statistics(), s.fallback.CacheStats()
	return CacheStats{
		Hits:      g.Hits + e.Hits + s.hits.Load(),
		Misses:    g.Misses + e.Misses,
		Evictions: g.Evictions + e.Evictions,
		Tables:    g.Tables + e.Tables,
		Bytes:     g.Bytes + e.Bytes,
	}
}

// Sweep drops the GSYM files and ELF tables not used since the previous
// Sweep, and sizes the files kept again, as their decoded functions and
// strings grow. A long-lived caller (the agent, at each interval) calls it
// so a binary no longer run leaves the cache. A dropped file is unmapped
// once no lookup holds it, at the next garbage collection.
func (s *GSYM) Sweep() {
	s.tables.sweep((*gsymTable).cost)
	s.fallback.Sweep()
	s.rebuildFront()
	// After the sweep, so the first lookup of each table marks it used
	// in the new period.
	s.epoch.Add(1)
}

// Symbolize implements Symbolizer: one frame per inline level, innermost
// first, from the binary's GSYM file, else from the ELF symbolizer.
func (s *GSYM) Symbolize(dst []stacks.Frame, b Binary, off uint64) ([]stacks.Frame, error) {
	t, err := s.table(b)
	if err != nil {
		return dst, err
	}
	if t.r == nil {
		return s.fallback.Symbolize(dst, b, off)
	}
	addr, ok := t.loads.Vaddr(off)
	if !ok {
		return dst, nil
	}
	res := s.results.Get().(*gsym.LookupResult)
	defer s.results.Put(res)
	return s.frames(dst, t, b, off, res, t.r.LookupInto(res, addr))
}

var _ BatchSymbolizer = (*GSYM)(nil)

// SymbolizeBatch implements BatchSymbolizer: the offsets' addresses are
// looked up in one gsym.Reader.LookupBatch, which sorts them and reads
// the file in order (BenchmarkLookupBatch in symbolize/gsym). The first
// error is returned after all the offsets have been tried.
func (s *GSYM) SymbolizeBatch(b Binary, offs []uint64, fn func(i int, frames []stacks.Frame)) error {
	t, err := s.table(b)
	if err != nil {
		return err
	}
	if t.r == nil {
		return SymbolizeAll(s.fallback, b, offs, fn)
	}
	addrs := make([]uint64, 0, len(offs))
	index := make([]int, 0, len(offs)) // of each address in offs
	for i, off := range offs {
		if addr, ok := t.loads.Vaddr(off); ok {
			addrs = append(addrs, addr)
			index = append(index, i)
		} else {
			fn(i, nil)
		}
	}
	var frames []stacks.Frame
	var first error
	t.r.LookupBatch(addrs, func(j int, res *gsym.LookupResult, err error) {
		i := index[j]
		frames, err = s.frames(frames[:0], t, b, offs[i], res, err)
		if err != nil && first == nil {
			first = err
		}
		fn(i, frames)
	})
	return first
}

// frames appends the frames of a lookup of off in b: res, or err. The
// ELF symbolizer answers what GSYM does not cover (from .dynsym or
// MiniDebugInfo), and the pclntab lines of Go programs without DWARF,
// whose GSYM holds their symbol table alone. Elsewhere a function without
// a line keeps the GSYM's answer: C functions without a line have none in
// DWARF either (every C stack ends in _start), and in Go programs with
// DWARF they are method wrappers, where the pclntab says
// <autogenerated>:1. Asking the ELF symbolizer would read the whole DWARF
// again, seconds of CPU and tens of megabytes for a large Go service,
// each time its tables are evicted.
func (s *GSYM) frames(dst []stacks.Frame, t *gsymTable, b Binary, off uint64, res *gsym.LookupResult, err error) ([]stacks.Frame, error) {
	if err == nil && t.goProgram && (len(res.Locations) == 0 || res.Locations[0].Line == 0) {
		if dst, ok := s.goFrames(dst, t, b, off); ok {
			return dst, nil
		}
	}
	if errors.Is(err, gsym.ErrNotFound) {
		if dst, ok := s.goFrames(dst, t, b, off); ok {
			return dst, nil
		}
		n := len(dst)
		if dst, ferr := s.fallback.Symbolize(dst, b, off); ferr != nil || len(dst) > n || err != nil {
			return dst, ferr
		}
	}
	if err != nil {
		return dst, fmt.Errorf("%s: %w", b.Path, err)
	}
	for _, loc := range res.Locations {
		f := stacks.Frame{Line: int(loc.Line)}
		f.Function, f.SystemName, f.File = t.strings(loc)
		dst = append(dst, f)
	}
	return dst, nil
}

// gsymTable is one binary's GSYM file, mapped, with the binary's segments
// to turn file offsets into addresses. A nil r means the binary has no
// GSYM file, which is believed until noneUntil.
type gsymTable struct {
	loads     elfx.Segments
	r         *gsym.Reader
	fileSize  int64 // of r's file, all of it mapped
	style     Demangling
	goProgram bool
	noneUntil time.Time
	// goLines names a Go program without DWARF from its pclntab, loaded
	// when first needed (see goLines); goTried says it was tried.
	goMu      sync.Mutex
	goTried   bool
	goLines   *goLines
	goLinesSz atomic.Int64
	epoch     atomic.Uint64 // the GSYM's epoch when t was last touched in its LRU

	// Frames' strings, by where the reader's strings lie in the mapping:
	// names demangled once, and everything copied out of the mapping so
	// frames outlive it. Keys are positions, not contents, so a hit costs
	// no hashing of long C++ names; a sync.Map, so a hit takes no lock.
	shown      sync.Map // place → *shown
	shownCount atomic.Int64
}

// cost estimates t's memory in bytes: the mapped file, whose pages the
// lookups bring into memory, and the heap the reader and t fill as they
// are used. The reader's share follows gsym.Reader: a slot of 16 bytes
// per function up to 65,536 in its cache of decoded records, a byte per
// function in its address index and 40 bytes per file for the file
// table's strings. A decoded record is taken as four times the average
// encoded function, and there are no more decoded functions than shown
// strings, each counted at shownCost.
func (t *gsymTable) cost() int64 {
	size := int64(len(t.loads))*32 + 256
	if t.r == nil {
		return size
	}
	n := int64(t.r.NumFunctions())
	slots := int64(64)
	for slots < n && slots < 1<<16 {
		slots *= 2
	}
	perRecord := 4 * t.fileSize / max(n, 1)
	return size + t.fileSize + 16*slots + n + 40*int64(t.r.NumFiles()) +
		t.shownCount.Load()*(shownCost+perRecord) + t.goLinesSz.Load()
}

// goFrames appends the frames at off of a Go program without DWARF from
// its pclntab, the inlined calls there too (see goLines), false,
// appending none, if it cannot: the program has DWARF, or no function of
// the pclntab is there.
func (s *GSYM) goFrames(dst []stacks.Frame, t *gsymTable, b Binary, off uint64) ([]stacks.Frame, bool) {
	if !t.goProgram {
		return dst, false
	}
	g := s.goLinesOf(t, b)
	if g == nil {
		return dst, false
	}
	addr, ok := t.loads.Vaddr(off)
	if !ok {
		return dst, false
	}
	n := len(dst)
	dst, ok, err := g.frames(dst, b.Path, addr, true)
	if err != nil || !ok {
		return dst[:n], false
	}
	return dst, true
}

// goLinesOf returns t's goLines, loading them the first time; nil for a
// program with DWARF, here or in a debug file the ELF symbolizer would
// find, whose inlined frames only the ELF symbolizer gives. A file that
// could not be opened (its process exited) is tried again next time.
func (s *GSYM) goLinesOf(t *gsymTable, b Binary) *goLines {
	t.goMu.Lock()
	defer t.goMu.Unlock()
	if t.goTried {
		return t.goLines
	}
	locate := s.fallback.debugLocator(b, b.BuildID)
	g, err := loadGoLines(b.Path, func(r io.ReaderAt, f *elf.File, size int64) bool {
		for _, sec := range f.Sections {
			if strings.HasPrefix(sec.Name, ".debug_") || strings.HasPrefix(sec.Name, ".zdebug_") {
				return true
			}
		}
		id, _ := buildid.Read(r)
		return locate(id, readDebuglink(f, size)) != ""
	})
	if _, ok := errors.AsType[*fs.PathError](err); ok {
		return nil
	}
	t.goTried, t.goLines = true, g
	if g != nil {
		t.goLinesSz.Store(g.size)
	}
	return g
}

// shownCost estimates the bytes of one entry of gsymTable.shown: the
// sync.Map entry, the key, the *shown and its copied strings.
const shownCost = 256

// place is where the strings of one gsym.SourceLocation lie: views into
// the reader's string table, the same for every result naming the same
// entries (gsym.Reader.Close invalidates them).
type place struct{ name, dir, base *byte }

// shown are the strings of a frame.
type shown struct{ function, system, file string }

// maxShown bounds the entries a table keeps per function of its file, so
// the map stays bounded even if the reader's strings were not views of its
// string table.
const maxShown = 4

// strings returns the function name shown, the name as spelled when it
// differs, and the source path of loc.
func (t *gsymTable) strings(loc gsym.SourceLocation) (function, system, file string) {
	k := place{unsafe.StringData(loc.Name), unsafe.StringData(loc.Dir), unsafe.StringData(loc.Base)}
	if v, ok := t.shown.Load(k); ok {
		v := v.(*shown)
		return v.function, v.system, v.file
	}
	v := &shown{function: strings.Clone(loc.Name)}
	if mangled(v.function) && t.style != DemangleNone {
		if d := demangled(v.function, t.style); d != v.function {
			v.function, v.system = d, v.function
		}
	}
	if loc.Base != "" {
		v.file = path.Join(loc.Dir, loc.Base)
	}
	if t.shownCount.Load() < maxShown*int64(t.r.NumFunctions()) {
		if _, loaded := t.shown.LoadOrStore(k, v); !loaded {
			t.shownCount.Add(1)
		}
	}
	return v.function, v.system, v.file
}

// table returns b's mapped GSYM file, converting b on first use.
func (s *GSYM) table(b Binary) (*gsymTable, error) {
	key, err := s.cacheName(b)
	if err != nil {
		return nil, err
	}
	if m := s.front.Load(); m != nil {
		if t, ok := (*m)[key]; ok {
			if e := s.epoch.Load(); t.epoch.Load() != e {
				t.epoch.Store(e)
				// A hit moves t to the front of the LRU and marks it
				// used for Sweep; were t evicted meanwhile, it goes back
				// in.
				s.get(key, func() (*gsymTable, error) { return t, nil })
			} else {
				s.hits.Add(1)
			}
			return t, nil
		}
	}
	load := func() (*gsymTable, error) { return s.load(b, key) }
	t, err := s.get(key, load)
	if err == nil && t.r == nil && time.Now().After(t.noneUntil) {
		// Look again whether b still gives no GSYM (see noneTTL).
		s.tables.evict(key)
		t, err = s.get(key, load)
	}
	return t, err
}

// get is the cache's get; after a load, which alone adds or evicts
// tables, it rebuilds front.
func (s *GSYM) get(key string, load func() (*gsymTable, error)) (*gsymTable, error) {
	loaded := false
	t, err := s.tables.get(key, func() (*gsymTable, int64, error) {
		loaded = true
		t, err := load()
		if err != nil {
			return nil, 0, err
		}
		return t, t.cost(), nil
	})
	if loaded {
		s.epoch.Add(1)
		s.rebuildFront()
	}
	return t, err
}

// rebuildFront replaces front with the mapped tables the cache now holds.
// Tables of binaries without GSYM stay out: their lookups go to the ELF
// symbolizer, which costs far more than the cache's lock, and table
// checks them for expiry.
func (s *GSYM) rebuildFront() {
	s.frontMu.Lock()
	defer s.frontMu.Unlock()
	c := s.tables
	c.mu.Lock()
	m := make(map[string]*gsymTable, c.lru.Len())
	for e := c.lru.Front(); e != nil; e = e.Next() {
		if en := e.Value.(*entry[*gsymTable]); en.err == nil && en.val.r != nil {
			m[en.key] = en.val
		}
	}
	c.mu.Unlock()
	s.front.Store(&m)
}

// evict drops key's entry from the cache if it is loaded.
func (c *cache[V]) evict(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[key]; ok && e.elem != nil {
		c.lru.Remove(e.elem)
		delete(c.entries, key)
		c.used -= e.size
	}
}

// cacheName is the base name of b's file in the cache directory: its build
// ID, or for a binary without one a hash of its path, size and
// modification time, so a rebuilt binary never meets a stale file. Such a
// binary (every Go program the Go linker built alone) is stat'ed at each
// call; the hash is made once per version of the file.
func (s *GSYM) cacheName(b Binary) (string, error) {
	if b.BuildID != "" {
		// Checked by load, once, before it names a file.
		return b.BuildID, nil
	}
	var st syscall.Stat_t
	if err := syscall.Stat(b.Path, &st); err != nil {
		return "", &fs.PathError{Op: "stat", Path: b.Path, Err: err}
	}
	name := b.Name
	if name == "" {
		name = b.Path
	}
	v := fileVersion{name, st.Size, st.Mtim.Sec, st.Mtim.Nsec}
	s.namesMu.RLock()
	key, ok := s.names[v]
	s.namesMu.RUnlock()
	if ok {
		return key, nil
	}
	h := sha256.New()
	for _, f := range []string{name, strconv.FormatInt(st.Size, 10), strconv.FormatInt(st.Mtim.Sec, 10), strconv.FormatInt(st.Mtim.Nsec, 10)} {
		h.Write([]byte(f))
		h.Write([]byte{0})
	}
	key = "file-" + hex.EncodeToString(h.Sum(nil)[:16])
	s.namesMu.Lock()
	defer s.namesMu.Unlock()
	if len(s.names) >= maxNames {
		// Files rebuilt again and again: start over rather than grow.
		clear(s.names)
	}
	s.names[v] = key
	return key, nil
}

// fileVersion is what names a binary without build ID in the cache.
type fileVersion struct {
	name            string
	size, sec, nsec int64
}

// maxNames bounds the cache names kept for binaries without build ID.
const maxNames = 4096

// load maps b's GSYM file from the cache directory, converting b first
// when the file is not there. A binary that gives no GSYM is remembered by
// a ".none" file, so the next runs do not try again while it stays valid
// (see noneTTL and noneSignature).
//
// A binary whose debug file debuginfod could not supply is converted
// without it into a ".partial.gsym" file, used only while the miss is
// remembered (see debuginfod.Client.MissTTL): once the server has the
// file, the binary is converted again, whole.
func (s *GSYM) load(b Binary, key string) (*gsymTable, error) {
	if b.BuildID != "" && !buildid.Valid(b.BuildID) {
		return nil, fmt.Errorf("%s: build ID %q is not lower-case hex", b.Path, b.BuildID)
	}
	elfInfo, err := inspect(b)
	if err != nil {
		return nil, err
	}
	t := &gsymTable{loads: elfInfo.loads, goProgram: elfInfo.goProgram, style: s.opts.Demangle,
		noneUntil: time.Now().Add(noneTTL)}
	final := filepath.Join(s.dir, key+".gsym")
	none := filepath.Join(s.dir, key+".none")
	sig := elfInfo.noneSignature(b, s.dirs)
	if until, ok := validNone(none, sig); ok {
		s.failed.Add(1)
		t.noneUntil = until
		return t, nil
	}
	if r, ok := s.open(final); ok {
		return t.mapped(r, final), nil
	}
	if s.fetcher != nil && elfInfo.needsDebugFile(b, s.local) {
		if _, err := s.fetcher.Fetch(s.ctx, elfInfo.id); err != nil {
			// Converted without the debug file, kept apart.
			final, none = filepath.Join(s.dir, key+".partial.gsym"), ""
			if r, ok := s.open(final); ok {
				return t.mapped(r, final), nil
			}
		}
	}
	if err := s.ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: not converted: %w", b.Path, err)
	}
	c, st, err := convert.ELF(b.Path, convert.Options{DebugDirs: s.dirs, Context: s.ctx})
	if errors.Is(err, context.Canceled) {
		return nil, err // not a fact about b: no ".none"
	}
	if err == nil {
		err = writeCacheFile(final, c, gsym.EncodeOptions{ByteOrder: st.ByteOrder})
	}
	if err != nil {
		if _, ok := errors.AsType[*fs.PathError](err); ok {
			return nil, err
		}
		s.failed.Add(1)
		if none != "" {
			// Not written atomically: a torn file does not match the
			// signature, so it only costs another try.
			os.WriteFile(none, sig, 0o600)
		}
		return t, nil
	}
	s.converted.Add(1)
	r, err := openCacheFile(final)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", b.Path, err)
	}
	return t.mapped(r, final), nil
}

// noneTTL is how long a binary is believed to give no GSYM (a ".none"
// file, or a table without a reader) before it is tried again. Within it
// the binary's size, modification time and debug file are compared with
// the file's record at every load, so a rebuilt binary or a debug package
// installed meanwhile is converted at the next run; the TTL covers what
// that misses (a debug directory mounted later) and a symbolizer running
// for days. Trying again is cheap: a binary that gives no GSYM has little
// to read.
const noneTTL = time.Hour

// noneSignature is what a ".none" file records of b.
func (info elfInfo) noneSignature(b Binary, dirs []string) []byte {
	return fmt.Appendf(nil, "size %d\nmtime %d\ndebug file %s\n", info.size, info.mtime, info.debugFile(b, dirs))
}

// validNone reports whether the ".none" file p still holds for a binary
// of signature sig, and until when; a stale one is removed.
func validNone(p string, sig []byte) (time.Time, bool) {
	st, err := os.Stat(p)
	if err != nil {
		return time.Time{}, false
	}
	until := st.ModTime().Add(noneTTL)
	if got, err := os.ReadFile(p); err != nil || time.Now().After(until) || !bytes.Equal(got, sig) {
		os.Remove(p)
		return time.Time{}, false
	}
	return until, true
}

// open maps the cached file p if it is there, reads and matches its
// checksum; one that does not is removed, to be converted again. A file
// whose checksum does not match was changed on disk: the symbolizer says
// so, once per file. (One without a checksum is an older sprof's.)
func (s *GSYM) open(p string) (*gsym.Reader, bool) {
	r, err := openCacheFile(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, false
		}
		os.Remove(p)
		if ce, ok := errors.AsType[*checksumError](err); ok && s.opts.Warnings != nil {
			fmt.Fprintf(s.opts.Warnings, "GSYM cache file %s is damaged (%v); converting its binary again\n", p, ce)
		}
		return nil, false
	}
	s.reused.Add(1)
	return r, true
}

// mapped attaches r, the mapping of the file p, to t, unmapping it once t
// is no longer used; frames never point into the mapping (see strings).
func (t *gsymTable) mapped(r *gsym.Reader, p string) *gsymTable {
	t.r = r
	if st, err := os.Stat(p); err == nil {
		t.fileSize = st.Size()
	}
	runtime.AddCleanup(t, func(r *gsym.Reader) { r.Close() }, r)
	return t
}

// staleAge is how old a temporary file must be to be taken for the
// leftover of a crashed writer rather than the work of a running one.
const staleAge = time.Hour

// removeStale removes the temporary files of conversions that crashed
// while writing (see gsym.Creator.WriteFile).
func removeStale(dir string) {
	tmps, _ := filepath.Glob(filepath.Join(dir, ".*.tmp*"))
	for _, p := range tmps {
		if st, err := os.Lstat(p); err == nil && time.Since(st.ModTime()) > staleAge {
			os.Remove(p)
		}
	}
}

// elfInfo is what the GSYM symbolizer reads of a binary itself.
type elfInfo struct {
	size      int64
	mtime     int64 // nanoseconds since the epoch
	loads     elfx.Segments
	hasDWARF  bool
	goProgram bool
	id        string // GNU build ID, "" if none
	link      debugfile.Link
}

// inspect reads b's PT_LOAD headers, and whether it carries DWARF or else
// how its debug file is found.
func inspect(b Binary) (elfInfo, error) {
	var info elfInfo
	f, err := os.OpenFile(b.Path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return info, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return info, err
	}
	info.size, info.mtime = st.Size(), st.ModTime().UnixNano()
	err = contain(b.Path, func() error {
		ef, err := elf.NewFile(f)
		if err != nil {
			return fmt.Errorf("%s: %w: %w", b.Path, ErrMalformed, err)
		}
		info.loads = elfx.LoadSegments(ef)
		info.hasDWARF = ef.Section(".debug_info") != nil || ef.Section(".zdebug_info") != nil
		info.goProgram = elfx.IsGo(ef)
		if !info.hasDWARF {
			info.link = readDebuglink(ef, st.Size())
			if info.id = b.BuildID; info.id == "" {
				info.id, _ = buildid.Read(f)
			}
		}
		return nil
	})
	return info, err
}

// needsDebugFile reports whether b has no DWARF of its own nor a debug
// file in the debug directories dirs, but a build ID to ask a server by.
func (info elfInfo) needsDebugFile(b Binary, dirs []string) bool {
	return !info.hasDWARF && info.id != "" && info.debugFile(b, dirs) == ""
}

// debugFile returns the separate debug file of a binary without DWARF
// found in dirs, or "".
func (info elfInfo) debugFile(b Binary, dirs []string) string {
	if info.hasDWARF {
		return ""
	}
	req := debugfile.Request{BuildID: info.id, Link: info.link, DebugDirs: dirs}
	if !strings.Contains(b.Path, "/map_files/") {
		req.BinaryDirs = []string{filepath.Dir(b.Path)}
	}
	return debugfile.Find(req)
}
