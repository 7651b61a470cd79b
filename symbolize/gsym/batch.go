package gsym

import (
	"cmp"
	"math/bits"
	"runtime"
	"slices"
	"sync"
)

// LookupBatch looks up every address of addrs, as LookupInto would one at
// a time, and calls fn with each address's index in addrs and its result
// or error. The calls come one at a time but in no particular order,
// possibly from other goroutines; res and its Locations are reused once
// fn returns (their strings stay valid until Close), so fn copies what it
// keeps. Concurrent batches are safe.
//
// A profile's addresses are symbolized together, and a batch pays for
// that: it sorts the addresses (a radix sort), walks the address table
// and the FunctionInfo records in file order, reads each function's
// header once for all its addresses, streams its line table once for all
// of them in increasing order and decodes its inline tree once. Lookups
// one at a time spread over a large binary wait on a cache miss at every
// step of that path; in order, the hardware prefetches it. A large batch
// is cut into one part per CPU (GOMAXPROCS), looked up in parallel,
// unless the cache holds most of its functions decoded (see
// mostlyDecoded). A batch allocates almost nothing once the Reader has served one of its
// size (its buffers are kept for the next).
func (r *Reader) LookupBatch(addrs []uint64, fn func(i int, res *LookupResult, err error)) {
	b, _ := r.batches.Get().(*batch)
	if b == nil {
		b = r.newBatch()
	}
	defer func() {
		b.fn, b.addrs = nil, nil
		for _, w := range b.workers {
			w.fn, w.addrs = nil, nil
		}
		r.batches.Put(b)
	}()
	if !r.sorted {
		// A corrupt table: only the binary search answers as LLVM's does.
		for i, a := range addrs {
			fn(i, &b.res, r.LookupInto(&b.res, a))
		}
		return
	}
	b.sort(addrs)
	parts := min(runtime.GOMAXPROCS(0), len(addrs)/minPart)
	if parts <= 1 || b.mostlyDecoded() {
		b.fn = fn
		b.walk(0, len(b.keys))
		return
	}
	// Workers buffer their answers and hand them to fn under mu, a
	// function's answers at a time.
	var mu sync.Mutex
	var wg sync.WaitGroup
	for len(b.workers) < parts {
		b.workers = append(b.workers, b.r.newBatch())
	}
	for k, w := range b.workers[:parts] {
		w.keys, w.addrs, w.lo, w.shift, w.packed = b.keys, b.addrs, b.lo, b.shift, b.packed
		w.fn, w.mu, w.out = fn, &mu, w.out[:0]
		wg.Go(func() {
			w.walk(len(b.keys)*k/parts, len(b.keys)*(k+1)/parts)
			w.flush()
		})
	}
	wg.Wait()
}

// mostlyDecoded reports whether most of the sorted addresses, judged
// by a sample of them, fall in functions the cache holds decoded. Such a
// batch is not split: answered from decoded records it is cheap, and
// parts cost more than they save (100,000 addresses in the go command:
// 72 CPU-ns a lookup in one part, twice that in two, and no faster).
func (b *batch) mostlyDecoded() bool {
	const samples = 64
	r, decoded := b.r, 0
	for k := range samples {
		i, ok := r.findIndex(b.addr(len(b.keys) * k / samples))
		if !ok {
			continue
		}
		if rec := r.cache.slots[i&(len(r.cache.slots)-1)].rec.Load(); rec != nil && rec.index == i {
			decoded++
		}
	}
	return decoded*2 >= samples
}

// minPart is the fewest addresses a batch gives a CPU of its own: below
// it, starting and feeding a goroutine costs more than it saves.
const minPart = 8192

// walk answers the sorted addresses [p, q).
func (b *batch) walk(p, q int) {
	r := b.r
	n, base := int(r.hdr.NumAddresses), r.hdr.BaseAddress
	for p < q {
		i, ok := r.findIndex(b.addr(p))
		if !ok {
			b.fail(p, ErrNotFound)
			p++
			continue
		}
		// The addresses up to the next function start all fall to the
		// entries with i's start.
		startOff := r.addrOffset(i)
		end := i + 1
		for end < n && r.addrOffset(end) == startOff {
			end++
		}
		k := q
		if end < n {
			next := r.addrOffset(end)
			for k = p + 1; k < q && b.addr(k)-base < next; k++ {
			}
		}
		b.start(p, k, i, end, base+startOff)
		p = k
	}
}

// batch is the state of one LookupBatch, kept by the Reader for the next.
type batch struct {
	r   *Reader
	fn  func(i int, res *LookupResult, err error)
	res LookupResult
	inl inlineDecoder // scratch: the inline tree of the function at hand

	// The addresses in order: keys[j] is, when packed, the address less
	// lo shifted above its index in addrs; else the index alone.
	keys, tmp []uint64
	addrs     []uint64
	lo        uint64
	shift     uint
	packed    bool

	workers []*batch // the parts of a parallel batch
	// A worker's answers wait in out, their Locations in locs, until
	// flush hands them to fn under mu.
	mu   *sync.Mutex
	out  []answer
	locs []SourceLocation
}

// answer is a worker's buffered answer.
type answer struct {
	i   int
	res LookupResult
	err error
}

func (r *Reader) newBatch() *batch {
	return &batch{r: r, inl: inlineDecoder{r: r, scratch: true}}
}

// flushAt is the most answers a worker buffers.
const flushAt = 256

// flush hands a worker's buffered answers to fn.
func (b *batch) flush() {
	b.mu.Lock()
	for k := range b.out {
		a := &b.out[k]
		b.fn(a.i, &a.res, a.err)
	}
	b.mu.Unlock()
	b.out, b.locs = b.out[:0], b.locs[:0]
}

// addr returns the j-th address in order.
func (b *batch) addr(j int) uint64 {
	if b.packed {
		return b.lo + b.keys[j]>>b.shift
	}
	return b.addrs[b.keys[j]]
}

// index returns the index in the caller's slice of the j-th address.
func (b *batch) index(j int) int {
	if b.packed {
		return int(b.keys[j] & (1<<b.shift - 1))
	}
	return int(b.keys[j])
}

// reset readies b.res for the lookup of addr, as LookupInto does.
func (b *batch) reset(addr uint64) {
	b.res = LookupResult{Addr: addr, Locations: b.res.Locations[:0]}
}

// answer reports the result in b.res, or err, for the j-th address: to
// fn, or into a worker's buffer.
func (b *batch) answer(j int, err error) {
	if b.mu == nil {
		b.fn(b.index(j), &b.res, err)
		return
	}
	res := b.res
	n := len(b.locs)
	b.locs = append(b.locs, res.Locations...)
	res.Locations = b.locs[n:len(b.locs):len(b.locs)]
	b.out = append(b.out, answer{b.index(j), res, err})
	if len(b.out) >= flushAt {
		b.flush()
	}
}

// fail reports err for the j-th address, found before a lookup began.
func (b *batch) fail(j int, err error) {
	b.reset(b.addr(j))
	b.answer(j, err)
}

// start answers the addresses [p, q), all at or above start and below
// the next function start: the entries [i, end) of the address table,
// which all begin at start. As LookupInto, each address goes to the
// first entry that covers it (a size of 0 covers everything up to the
// next start). An entry that does not cover an address covers none above
// it, so the entries are tried in order, each once.
func (b *batch) start(p, q, i, end int, start uint64) {
	r := b.r
	size, err := r.entrySize(i)
	for p < q {
		for err == nil && size != 0 && b.addr(p)-start >= size {
			if i++; i == end {
				for ; p < q; p++ {
					b.fail(p, ErrNotFound)
				}
				return
			}
			size, err = r.entrySize(i)
		}
		if err != nil {
			b.fail(p, err)
			p++
			continue
		}
		k := p + 1
		for k < q && (size == 0 || b.addr(k)-start < size) {
			k++
		}
		b.function(p, k, i, start)
		p = k
	}
}

// entrySize returns the size of function i, as LookupInto reads it.
func (r *Reader) entrySize(i int) (uint64, error) {
	off := r.infoOffset(i)
	if off >= r.infoEnd || off < r.infoBase || r.infoEnd-off < 4 {
		return 0, formatErr(off, "AddrInfoOffsets", "invalid address info offset 0x%x for function %d", off, i)
	}
	return uint64(r.u32(r.data[off:])), nil
}

// function answers the addresses [p, q), all in function i: from its
// decoded record when the cache holds it (or now decodes it), else from
// one read of its header, one pass over its line table and one decoding
// of its inline tree.
func (b *batch) function(p, q, i int, start uint64) {
	r := b.r
	slot := &r.cache.slots[i&(len(r.cache.slots)-1)]
	rec := slot.rec.Load()
	x := r.extractor(r.infoOffset(i), r.infoEnd)
	if rec == nil || rec.index != i {
		rec = nil
		// Each address counts as a lookup towards decoding the function
		// into the cache, as LookupInto counts it: batches of the same
		// profile's addresses, interval after interval, end up answered
		// from decoded records.
		if slot.hits.Add(uint32(min(q-p, promoteAfter))) >= r.cache.promote {
			slot.hits.Store(0)
			var err error
			if rec, err = r.decodeRecord(&x, start); err != nil {
				for ; p < q; p++ {
					b.fail(p, err)
				}
				return
			}
			rec.index = i
			slot.rec.Store(rec)
		}
	}
	if rec != nil {
		for ; p < q; p++ {
			a := b.addr(p)
			b.reset(a)
			b.answer(p, r.lookupRecord(&b.res, rec, a))
		}
		return
	}
	f, err := r.streamFunction(&x, start)
	if err != nil {
		for ; p < q; p++ {
			b.fail(p, err)
		}
		return
	}
	if f.hasInline && q-p > 1 {
		// Streaming walks the tree up to each address's path; decoded,
		// it is walked once. A tree that does not decode is streamed:
		// a lookup may still succeed before the damage.
		inline := f.inline
		if t, err := b.inl.decode(&inline, start); err == nil {
			f.nodes = t
		}
	}
	lines := f.lineCursor()
	for ; p < q; p++ {
		a := b.addr(p)
		b.reset(a)
		b.answer(p, r.answerStreamed(&b.res, &f, &lines, a))
	}
}

// sort puts addrs in order. When the addresses' span and the indexes fit
// together in 64 bits, as they do for the addresses of one binary, each
// becomes one key, span bits above index bits, sorted by a
// least-significant-digit radix sort over the span bits only: a few
// linear passes, where a comparison sort of 100,000 addresses costs as
// much as their lookups.
func (b *batch) sort(addrs []uint64) {
	b.addrs = addrs
	b.keys = grow(b.keys, len(addrs))
	if len(addrs) == 0 {
		return
	}
	lo, hi := slices.Min(addrs), slices.Max(addrs)
	spanBits := bits.Len64(hi - lo)
	idxBits := bits.Len(uint(len(addrs) - 1))
	b.packed = len(addrs) >= 256 && spanBits+idxBits <= 64
	if !b.packed {
		for i := range b.keys {
			b.keys[i] = uint64(i)
		}
		slices.SortFunc(b.keys, func(i, j uint64) int { return cmp.Compare(addrs[i], addrs[j]) })
		return
	}
	b.lo, b.shift = lo, uint(idxBits)
	for i, a := range addrs {
		b.keys[i] = (a-lo)<<idxBits | uint64(i)
	}
	b.tmp = grow(b.tmp, len(addrs))
	b.keys, b.tmp = radixSort(b.keys, b.tmp, b.shift, uint(spanBits))
}

// grow returns s resized to n, reusing its storage when it is enough.
func grow(s []uint64, n int) []uint64 {
	if cap(s) < n {
		return make([]uint64, n)
	}
	return s[:n]
}

// maxDigitBits bounds a radix pass's digit: 4,096 counters stay in the
// first-level cache.
const maxDigitBits = 12

// radixSort sorts keys by their bits [shift, shift+width), stably, using
// tmp (as long as keys) as the second buffer. It returns the sorted slice
// and the other one.
func radixSort(keys, tmp []uint64, shift, width uint) (sorted, other []uint64) {
	if width == 0 {
		return keys, tmp
	}
	passes := (width + maxDigitBits - 1) / maxDigitBits
	digit := (width + passes - 1) / passes
	var count [1 << maxDigitBits]int
	for end := shift + width; shift < end; shift += digit {
		d := min(digit, end-shift)
		mask := uint64(1)<<d - 1
		counts := count[:1<<d]
		clear(counts)
		for _, k := range keys {
			counts[k>>shift&mask]++
		}
		sum := 0
		for j, c := range counts {
			counts[j] = sum
			sum += c
		}
		for _, k := range keys {
			j := k >> shift & mask
			tmp[counts[j]] = k
			counts[j]++
		}
		keys, tmp = tmp, keys
	}
	return keys, tmp
}
