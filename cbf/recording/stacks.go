package recording

import (
	"encoding/binary"
	"errors"
	"hash/maphash"
	"math/bits"
	"slices"

	"github.com/sprof/sprof/cbf"
)

// Stacks are stored once per recording, not once per batch: a profiler
// sees the same hot stacks second after second, and stacks that differ
// share their outer frames (main, the request loop, the runtime's
// scheduler). Each entry of the recording's stack table is therefore a
// parent entry, a number of the parent's own leaf-side frames to drop, and
// the new leaf-side frames, each a difference from the frame after it or a
// reference to where the table holds its address already: the same
// return addresses recur under different callers. See cbf/FORMAT.md §5.

// Limits of a stack table, so that a reader's memory stays bounded whatever
// a file says. The writer starts a new table well before them.
const (
	// maxStackFrames caps the frames of one assembled stack.
	maxStackFrames = cbf.DefaultMaxFrames
	// maxTableFrames caps the frames stored in a table, all entries
	// together (8 bytes each).
	maxTableFrames = 1 << 22
	// writerTableFrames is where the writer starts a new table, so a
	// recording running for weeks does not grow its memory for ever.
	writerTableFrames = 1 << 20
	// maxHops caps the chain of parents of a version 2 entry, which
	// assembling its stack walks: a version 2 parent may add no frame to
	// the stack, but sprof's writer never put two such on a chain in a
	// row. (In version 3 every parent adds a frame.)
	maxHops = 2*maxStackFrames + 1
)

// StackTable is a recording's table of stacks as a reader rebuilds it from
// the Stacks chunks read so far. A table only grows, until the recording
// starts a new one (a new StackTable); a stack is named by its index.
type StackTable struct {
	entries []stackEntry
	words   []uint64 // the entries' own frames, leaf first
	// wordLost marks the words whose value is unknown, lost to damage
	// (see Reader); nil while there are none.
	wordLost []bool
}

// stackEntry is one entry: its own frames words[off:off+n], then the
// frames of entry parent (-1 for none) from index skip on.
type stackEntry struct {
	parent    int32
	skip      int32
	off, n    int32
	depth     int32 // frames of the assembled stack
	hops      int32 // entries on the chain of parents, this one included
	truncated bool  // the outermost entry ended with trunc
	// lost says the stack is unknown: its entry was in a damaged chunk,
	// or it refers to one that was.
	lost bool
}

// Len returns the number of stacks in the table.
func (t *StackTable) Len() int { return len(t.entries) }

// Lost says stack i is unknown, lost to damage: it was defined in a chunk
// the Reader skipped (or past the table, which a Samples chunk read after
// damage may refer to), or refers to such a stack. Stack must not be
// called for it.
func (t *StackTable) Lost(i int) bool { return i >= len(t.entries) || t.entries[i].lost }

// pad grows the table to entries entries and words words, the sizes a
// Tables chunk gives, with entries and words lost to damage. A table
// larger than entries was begun anew in what was lost: the new one starts
// with entries lost entries. It returns the table to use.
func (t *StackTable) pad(entries, words int) *StackTable {
	if entries < len(t.entries) {
		t = &StackTable{}
	}
	if entries == len(t.entries) && words == len(t.words) {
		return t
	}
	if t.wordLost == nil {
		t.wordLost = make([]bool, len(t.words), max(words, len(t.words)))
	}
	for len(t.entries) < entries {
		t.entries = append(t.entries, stackEntry{parent: -1, off: int32(len(t.words)), lost: true})
	}
	for len(t.words) < words {
		t.words = append(t.words, 0)
		t.wordLost = append(t.wordLost, true)
	}
	return t
}

// addWords extends the table's words by n and returns them, marked lost
// when lost.
func (t *StackTable) addWords(n int, lost bool) []uint64 {
	t.words = slices.Grow(t.words, n)[:len(t.words)+n]
	if t.wordLost != nil || lost {
		if t.wordLost == nil {
			t.wordLost = make([]bool, len(t.words)-n, len(t.words))
		}
		for range n {
			t.wordLost = append(t.wordLost, lost)
		}
	}
	return t.words[len(t.words)-n:]
}

// isLost says word i is unknown.
func (t *StackTable) isLost(i int64) bool { return t.wordLost != nil && t.wordLost[i] }

// Stack appends stack i to dst as frames, leaf first: the leaf's exact PC,
// then return addresses, then a Truncated frame when the walk that took
// the stack stopped before the outermost frame.
func (t *StackTable) Stack(dst []cbf.Frame, i int) []cbf.Frame {
	start := len(dst)
	skip := int32(0)
	e := &t.entries[i]
	for {
		if skip < e.n {
			for _, a := range t.words[e.off+skip : e.off+e.n] {
				dst = append(dst, cbf.Frame{Kind: cbf.RA, Addr: a})
			}
			skip = 0
		} else {
			skip -= e.n
		}
		if e.parent < 0 {
			break
		}
		skip += e.skip
		e = &t.entries[e.parent]
	}
	if len(dst) > start {
		dst[start].Kind = cbf.PC
	}
	if e.truncated {
		dst = append(dst, cbf.Frame{Kind: cbf.Truncated})
	}
	return dst
}

// parseStacks adds the entries of a Stacks chunk to t, or to a new table
// when the chunk starts one, and returns the table the chunk's entries went
// to.
func parseStacks(p payload, t *StackTable) (*StackTable, error) {
	off := p.off
	first, err := p.uvarint("first stack")
	if err != nil {
		return t, err
	}
	switch {
	case first == 0 && t.Len() > 0:
		t = &StackTable{}
	case first != uint64(t.Len()):
		return t, p.errorf(off, "first stack", "%d; the table holds %d stacks", first, t.Len())
	}
	n, err := p.count("stack count", 2)
	if err != nil {
		return t, err
	}
	t.entries = slices.Grow(t.entries, n)
	var frames []cbf.Frame
	for range n {
		if p.version == 2 {
			frames, err = t.parseEntryV2(&p, frames[:0])
		} else {
			err = t.parseEntry(&p)
		}
		if err != nil {
			return t, err
		}
	}
	return t, nil
}

// Bits of an entry's head below its frame count.
const (
	headShift    = 4
	headLowMask  = 1<<headShift - 1
	headTrunc    = 1           // without a parent: the stack is truncated
	headSkipMore = headLowMask // with a parent: skip − 15 follows
)

func (t *StackTable) parseEntry(p *payload) error {
	e := stackEntry{parent: -1}
	off := p.off
	parent, err := p.uvarint("stack parent")
	if err != nil {
		return err
	}
	if parent > uint64(len(t.entries)) {
		return p.errorf(off, "stack parent", "stack %d of %d", parent, len(t.entries))
	}
	off = p.off
	head, err := p.uvarint("stack head")
	if err != nil {
		return err
	}
	n, low := head>>headShift, head&headLowMask
	var join uint64 // the frame after the entry's own: they are stored relative to it
	if parent > 0 {
		e.parent = int32(parent - 1)
		pe := &t.entries[e.parent]
		skip := low
		if low == headSkipMore {
			more, err := p.uvarint("stack skip")
			if err != nil {
				return err
			}
			skip += min(more, maxStackFrames)
		}
		if pe.lost {
			// Its frames are read, to find the next entry and to give
			// later references their words, but nothing is known.
			e.lost, e.parent, skip = true, -1, 0
		} else if skip >= uint64(pe.n) {
			return p.errorf(off, "stack skip", "%d of a parent's %d own frames", skip, pe.n)
		}
		if !e.lost {
			e.skip, e.depth, e.truncated, e.hops = int32(skip), pe.depth-int32(skip), pe.truncated, pe.hops
			join = t.words[pe.off+e.skip]
		}
	} else if low > headTrunc {
		return p.errorf(off, "stack head", "%#x: bits of a skip without a parent", head)
	} else {
		e.truncated = low == headTrunc
	}
	e.hops++
	if n > maxStackFrames || n > uint64(len(p.b)-p.off) {
		return p.errorf(off, "stack head", "%d frames; the limit is %d and %d bytes are left", n, maxStackFrames, len(p.b)-p.off)
	}
	e.off, e.n = int32(len(t.words)), int32(n)
	e.depth += e.n
	if e.depth > maxStackFrames || len(t.words)+int(n) > maxTableFrames {
		return p.errorf(off, "stack", "%d frames in the stack, %d in the table; limits %d and %d",
			e.depth, len(t.words)+int(n), maxStackFrames, maxTableFrames)
	}
	// Stored from the outermost frame in; the words are leaf first.
	t.addWords(int(n), e.lost)
	end := int64(len(t.words))
	for i := int64(e.n) - 1; i >= 0; i-- {
		off := p.off
		v, err := p.uvarint("stack frame")
		if err != nil {
			return err
		}
		switch {
		case v == frameFar:
			d, err := p.varint("stack frame")
			if err != nil {
				return err
			}
			join += uint64(d)
		case v&1 != 0:
			// A reference back to a word already there: of an earlier
			// entry, or of this one's read so far.
			back := v >> 1
			at := end - int64(min(back, uint64(end)))
			if back > uint64(end) || at >= int64(e.off) && at <= int64(e.off)+i {
				return p.errorf(off, "stack frame", "a reference %d words back, to no frame read yet", back)
			}
			join = t.words[at]
			if t.isLost(at) && !e.lost {
				e.lost = true
				for j := int64(e.off); j < end; j++ {
					t.wordLost[j] = true
				}
			}
		default:
			z := v >> 1
			join += uint64(int64(z>>1) ^ -int64(z&1))
		}
		t.words[int64(e.off)+i] = join
	}
	t.entries = append(t.entries, e)
	return nil
}

// parseEntryV2 reads an entry of format version 2: its own frames are a CBF
// record, and its skip may reach into the parent's parents.
func (t *StackTable) parseEntryV2(p *payload, frames []cbf.Frame) ([]cbf.Frame, error) {
	e := stackEntry{parent: -1}
	off := p.off
	parent, err := p.uvarint("stack parent")
	if err != nil {
		return frames, err
	}
	if parent > uint64(len(t.entries)) {
		return frames, p.errorf(off, "stack parent", "stack %d of %d", parent, len(t.entries))
	}
	off = p.off
	skip, err := p.uvarint("stack skip")
	if err != nil {
		return frames, err
	}
	if parent > 0 && t.entries[parent-1].lost {
		e.lost = true
	} else if parent > 0 {
		e.parent = int32(parent - 1)
		pe := &t.entries[e.parent]
		if skip > uint64(pe.depth) {
			return frames, p.errorf(off, "stack skip", "%d of a parent's %d frames", skip, pe.depth)
		}
		e.skip, e.depth, e.truncated, e.hops = int32(skip), pe.depth-int32(skip), pe.truncated, pe.hops
		if e.hops >= maxHops {
			return frames, p.errorf(off, "stack parent", "a chain of %d parents; the limit is %d", e.hops, maxHops)
		}
	} else if skip != 0 {
		return frames, p.errorf(off, "stack skip", "%d without a parent", skip)
	}
	e.hops++
	off = p.off
	frames, n, err := cbf.Decode(frames, p.b[p.off:])
	if err != nil {
		var fe *cbf.FormatError
		if errors.As(err, &fe) {
			fe.Offset += p.base + int64(off) // a file offset, like every other
		}
		return frames, err
	}
	p.off += n
	e.off = int32(len(t.words))
	for i, f := range frames {
		switch {
		case f.Kind == cbf.PC || f.Kind == cbf.RA:
			t.words = append(t.words, f.Addr)
		case f.Kind == cbf.Truncated && i == len(frames)-1 && parent == 0:
			e.truncated = true
		default:
			return frames, p.errorf(off, "stack", "%v frame %d in a recording's stack", f.Kind, i)
		}
	}
	if t.wordLost != nil {
		for len(t.wordLost) < len(t.words) {
			t.wordLost = append(t.wordLost, e.lost)
		}
	}
	e.n = int32(len(t.words)) - e.off
	e.depth += e.n
	if e.depth > maxStackFrames || len(t.words) > maxTableFrames {
		return frames, p.errorf(off, "stack", "%d frames in the stack, %d in the table; limits %d and %d",
			e.depth, len(t.words), maxStackFrames, maxTableFrames)
	}
	t.entries = append(t.entries, e)
	return frames, nil
}

// stackDict is the writer's side of the stack table: it finds the entry of
// a stack, or the longest stack it ends with, by hashes of stack suffixes.
type stackDict struct {
	seed maphash.Seed
	// index maps the hash of every stack suffix the table can express to
	// an entry and the frames to skip of it.
	index map[uint64]suffix
	// bare maps the hash of a stack to its entry for the few entries of
	// no frames of their own: index keeps the stack they are a suffix of,
	// for entries that take it for parent.
	bare map[uint64]int32
	// last remembers where in words the table last stored an address,
	// so that a frame seen before is stored as a reference when that is
	// shorter than a difference.
	last    *addressCache
	entries []stackEntry
	words   []uint64
	// defined counts the entries already written; pending holds the
	// encoded entries after them, for the next Stacks chunk.
	defined int
	pending []byte
	hashes  []uint64 // scratch: suffix hashes of the stack being looked up
	// maxWords is where the writer starts a new table.
	maxWords int
}

// suffix says where the table holds a stack: the frames of entry from
// skip on, skip less than the entry's own frames, so that an entry that
// takes it for parent starts right at a frame of the parent's own.
type suffix struct{ entry, skip int32 }

func newStackDict() *stackDict {
	return &stackDict{seed: maphash.MakeSeed(), index: map[uint64]suffix{}, bare: map[uint64]int32{}, last: new(addressCache), maxWords: writerTableFrames}
}

// reset forgets every entry; the next Stacks chunk starts a new table.
func (d *stackDict) reset() {
	clear(d.index)
	clear(d.bare)
	d.last.reset()
	d.entries, d.words, d.defined, d.pending = d.entries[:0], d.words[:0], 0, d.pending[:0]
}

// suffixHashes returns h where h[i] is the hash of pcs[i:] and the
// truncation, computed from the outermost frame in.
func (d *stackDict) suffixHashes(pcs []uint64, truncated bool) []uint64 {
	h := slices.Grow(d.hashes[:0], len(pcs)+1)[:len(pcs)+1]
	h[len(pcs)] = 0x5bd1e995
	if truncated {
		h[len(pcs)] = 0x27d4eb2f
	}
	var buf [16]byte
	for i := len(pcs) - 1; i >= 0; i-- {
		binary.LittleEndian.PutUint64(buf[:], pcs[i])
		binary.LittleEndian.PutUint64(buf[8:], h[i+1])
		h[i] = maphash.Bytes(d.seed, buf[:])
	}
	d.hashes = h
	return h
}

// matches reports whether the stack s names is pcs with the given
// truncation.
func (d *stackDict) matches(s suffix, pcs []uint64, truncated bool) bool {
	e := &d.entries[s.entry]
	if e.depth-s.skip != int32(len(pcs)) || e.truncated != truncated {
		return false
	}
	skip := s.skip
	for {
		if skip < e.n {
			own := d.words[e.off+skip : e.off+e.n]
			if !slices.Equal(own, pcs[:len(own)]) {
				return false
			}
			pcs, skip = pcs[len(own):], 0
		} else {
			skip -= e.n
		}
		if e.parent < 0 {
			return len(pcs) == 0
		}
		skip += e.skip
		e = &d.entries[e.parent]
	}
}

// stack returns the index of the entry holding pcs, adding one (and
// encoding it for the next chunk) when there is none.
func (d *stackDict) stack(pcs []uint64, truncated bool) int32 {
	h := d.suffixHashes(pcs, truncated)
	// The longest suffix the table holds, the whole stack at best.
	at, found := len(pcs), suffix{entry: -1}
	for i := range len(pcs) {
		if s, ok := d.index[h[i]]; ok && d.matches(s, pcs[i:], truncated) {
			at, found = i, s
			break
		}
	}
	if at == 0 {
		if found.entry >= 0 && found.skip == 0 {
			return found.entry
		}
		if id, ok := d.bare[h[0]]; ok && d.matches(suffix{entry: id}, pcs, truncated) {
			return id
		}
	}
	id := int32(len(d.entries))
	e := stackEntry{parent: found.entry, skip: found.skip, off: int32(len(d.words)), n: int32(at), depth: int32(len(pcs)), truncated: truncated}
	d.words = append(d.words, pcs[:at]...)
	d.entries = append(d.entries, e)
	if at == 0 {
		d.bare[h[0]] = id // a suffix of a stored stack, or the empty one
	}
	for i := range at {
		d.index[h[i]] = suffix{entry: id, skip: int32(i)}
	}
	d.pending = binary.AppendUvarint(d.pending, uint64(found.entry+1))
	var join uint64 // the frame after the new ones
	if found.entry >= 0 {
		pe := &d.entries[found.entry]
		join = d.words[pe.off+found.skip]
		low := min(found.skip, headSkipMore)
		d.pending = binary.AppendUvarint(d.pending, uint64(at)<<headShift|uint64(low))
		if low == headSkipMore {
			d.pending = binary.AppendUvarint(d.pending, uint64(found.skip-headSkipMore))
		}
	} else {
		head := uint64(at) << headShift
		if truncated {
			head |= headTrunc
		}
		d.pending = binary.AppendUvarint(d.pending, head)
	}
	end := e.off + e.n
	for i := at - 1; i >= 0; i-- {
		a := pcs[i]
		p, seen := d.last.swap(a, e.off+int32(i))
		d.pending = appendFrame(d.pending, a-join, end-p, seen)
		join = a
	}
	return id
}

// appendFrame appends a frame of an entry: as a reference back to where
// the table last stored its address (back words before the entry's end),
// when it has and that is shorter, else as the difference delta from the
// frame after it.
func appendFrame(dst []byte, delta uint64, back int32, seen bool) []byte {
	z := uint64(int64(delta)<<1 ^ int64(delta)>>63) // zigzag
	switch {
	case seen && (z>>63 != 0 || uvarintLen(uint64(back)<<1|1) < uvarintLen(z<<1)):
		return binary.AppendUvarint(dst, uint64(back)<<1|1)
	case z>>63 != 0: // too far for a tagged difference
		return binary.AppendVarint(append(dst, frameFar), int64(delta))
	}
	return binary.AppendUvarint(dst, z<<1)
}

// frameFar marks a difference too large for a tagged uvarint (a reference
// back 0 words, which cannot be).
const frameFar = 1

func uvarintLen(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }

// appendPayload encodes the entries added since the last call as a Stacks
// chunk's payload; ok is false when there are none.
func (d *stackDict) appendPayload(dst []byte) (_ []byte, ok bool) {
	n := len(d.entries) - d.defined
	if n == 0 {
		return dst, false
	}
	dst = binary.AppendUvarint(dst, uint64(d.defined))
	dst = binary.AppendUvarint(dst, uint64(n))
	dst = append(dst, d.pending...)
	d.defined, d.pending = len(d.entries), d.pending[:0]
	return dst, true
}

// addressCache maps addresses to where the table last stored them, like a
// map but of fixed size and without growth: a direct-mapped cache, where a
// newer address evicts an older one of the same slot. It finds most
// repeated addresses for a fraction of a map's cost (the writer looks up
// every new frame); one it misses is stored as a difference instead.
type addressCache [1 << 13]struct {
	addr uint64
	pos  int32 // position in words + 1; 0 for an empty slot
}

// swap returns where addr was last stored, if the cache knows, and
// records pos as its new place.
func (c *addressCache) swap(addr uint64, pos int32) (int32, bool) {
	slot := &c[(addr*0x9e3779b97f4a7c15)>>(64-13)]
	old, ok := slot.pos-1, slot.pos != 0 && slot.addr == addr
	slot.addr, slot.pos = addr, pos+1
	return old, ok
}

func (c *addressCache) reset() { *c = addressCache{} }
