package collector

import (
	"hash/maphash"
	"slices"
	"unsafe"
)

// Sample is one raw sample as the BPF sampler hands it over (see
// collector/bpfsource, which copies the header field by field).
type Sample struct {
	// Time is CLOCK_MONOTONIC nanoseconds (bpf_ktime_get_ns), the clock
	// of the side-band records it is ordered against.
	Time          uint64
	Pid, Tid, CPU uint32
	Comm          [16]byte
	// PC, SP, FP, LR are the user registers at the sample.
	PC, SP, FP, LR uint64
	// User is the user stack leaf first (User[0] == PC); Kernel the
	// kernel stack leaf first, empty when the CPU was in user mode.
	User          []uint64
	Kernel        []uint64
	UserTruncated bool
	// LeafReturn says User[1] is the leaf's return address, which the
	// sampler's frame-pointer walk took from the top of the stack or the
	// link register, not from a frame record (bpf.Sample.LeafReturn).
	LeafReturn bool
	// UserTables says the sampler walked User over unwind tables in the
	// kernel (TableLoader); without UserTruncated it is whole.
	UserTables bool
	// Goroutine says the sampler followed a Go walk from
	// runtime.morestack to the goroutine whose stack grows (GoMarker):
	// the frames after morestack's are the goroutine's.
	Goroutine bool
	// Python holds the Python frames of a CPython process's thread as the
	// sampler records them (bpf.Sample.Python); PythonTruncated says the
	// chain was cut short, and PythonFresh that the sampler asks to be
	// told of the innermost frame's code object (PythonNamer).
	Python          []uint64
	PythonTruncated bool
	PythonFresh     bool
	// StackCopy is the user stack from address SP upward, for processes
	// marked through CopyMarker (empty otherwise); StackCopyTruncated says
	// the sampler clipped it below the stack's end.
	StackCopy          []byte
	StackCopyTruncated bool
	// OffCPU is nonzero for an off-CPU record: the thread was off the
	// CPU this many nanoseconds before Time, with these stacks.
	OffCPU uint64
}

// span is a slice of an arena of words, by position, so that arenas can
// grow without invalidating it.
type span struct{ off, n int32 }

func (s span) of(words []uint64) []uint64 { return words[s.off : s.off+s.n] }

func appendSpan(words []uint64, w []uint64) ([]uint64, span) {
	s := span{int32(len(words)), int32(len(w))}
	return append(words, w...), s
}

// stackKey is what makes two samples the same: the same thread under the
// same mappings with the same name and the same stacks. The container is
// not hashed: the pid and the mapSet all but decide it, and keys that
// collide are told apart by comparing it.
type stackKey struct {
	set       *mapSet
	pid, tid  uint32
	comm      [16]byte
	truncated bool
	container string
}

// entry is one aggregated stack.
type entry struct {
	stackKey
	user, kernel span
	count        int64 // CPU samples
	offCPU       int64 // nanoseconds off the CPU
	next         int32 // next entry with the same hash, -1 at the end
}

// aggregator counts identical stacks. Stack words are interned in one
// arena, and a sample already seen costs a hash of its words, one map
// lookup and one comparison: no allocation.
type aggregator struct {
	seed    maphash.Seed
	heads   map[uint64]int32
	entries []entry
	words   []uint64
	// hdr is scratch space for the fixed part of the key, kept here so
	// hashing does not allocate.
	hdr [32]byte
}

func newAggregator() *aggregator {
	return &aggregator{seed: maphash.MakeSeed(), heads: map[uint64]int32{}}
}

func wordBytes(w []uint64) []byte {
	if len(w) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), len(w)*8)
}

func (a *aggregator) hash(k *stackKey, user, kernel []uint64) uint64 {
	h := &a.hdr
	put32 := func(i int, v uint32) { h[i], h[i+1], h[i+2], h[i+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24) }
	put32(0, k.set.id)
	put32(4, k.pid)
	put32(8, k.tid)
	put32(12, uint32(len(user)))
	copy(h[16:], k.comm[:])
	if k.truncated {
		h[16+15] ^= 0x80 // comm's last byte is always NUL
	}
	// Hashing the three parts separately and mixing them avoids the
	// copying through maphash.Hash's buffer: a third of the cost.
	x := maphash.Bytes(a.seed, h[:])
	x = mix(x, maphash.Bytes(a.seed, wordBytes(user)))
	if len(kernel) > 0 {
		x = mix(x, maphash.Bytes(a.seed, wordBytes(kernel)))
	}
	return x
}

// mix combines two hashes so that the order matters.
func mix(a, b uint64) uint64 {
	a ^= b + 0x9e3779b97f4a7c15 + a<<6 + a>>2
	return a
}

// find returns the index of the entry for the key, or -1.
func (a *aggregator) find(h uint64, k *stackKey, user, kernel []uint64) int32 {
	i, ok := a.heads[h]
	if !ok {
		return -1
	}
	for ; i >= 0; i = a.entries[i].next {
		e := &a.entries[i]
		if e.stackKey == *k && slices.Equal(e.user.of(a.words), user) && slices.Equal(e.kernel.of(a.words), kernel) {
			return i
		}
	}
	return -1
}

// add counts one more sample of the entry's stack: a CPU sample, or
// offCPU nanoseconds off the CPU.
func (e *entry) add(offCPU uint64) {
	if offCPU == 0 {
		e.count++
	} else {
		e.offCPU += int64(offCPU)
	}
}

// insert adds a new entry for one sample (see entry.add).
func (a *aggregator) insert(h uint64, k *stackKey, user, kernel []uint64, offCPU uint64) {
	e := entry{stackKey: *k, next: -1}
	e.add(offCPU)
	if head, ok := a.heads[h]; ok {
		e.next = head
	}
	a.words, e.user = appendSpan(a.words, user)
	a.words, e.kernel = appendSpan(a.words, kernel)
	a.heads[h] = int32(len(a.entries))
	a.entries = append(a.entries, e)
}
