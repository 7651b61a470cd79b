package symbolize

import (
	"container/list"
	"context"
	"errors"
	"io/fs"
	"sync"
)

// cache holds loaded tables by key within a memory budget, evicting the
// least recently used, and drops the tables left unused between two
// sweeps. A table is loaded once: concurrent callers for the same key wait
// for the first one's result instead of loading it again.
type cache[V any] struct {
	mu      sync.Mutex
	budget  int64
	used    int64
	entries map[string]*entry[V]
	lru     list.List // of *entry[V], most recently used first
	stats   CacheStats
	sweeps  uint64 // sweeps so far
}

type entry[V any] struct {
	key  string
	done chan struct{}
	val  V
	err  error
	size int64
	elem *list.Element
	// seen is the cache's sweeps when the entry was last used: one
	// lower than that at the next sweep means unused since the last.
	seen uint64
}

// CacheStats counts the work of a symbolizer's table cache.
type CacheStats struct {
	// Hits and Misses count lookups that found a table and lookups that
	// had to load one (each miss reads one binary).
	Hits, Misses uint64
	// Evictions counts tables dropped to stay within the budget or left
	// unused between two sweeps.
	Evictions uint64
	// Tables and Bytes are what the cache holds now.
	Tables int
	Bytes  int64
}

func newCache[V any](budget int64) *cache[V] {
	return &cache[V]{budget: budget, entries: make(map[string]*entry[V])}
}

// get returns the value for key, calling load to make it on a miss. load
// reports the value's approximate size in bytes. Errors about a file's
// content are cached like values, since the key names that content;
// errors opening or reading it (*fs.PathError: a process that exited, a
// file not yet readable) are not, so the next caller tries again, nor is a
// load cancelled (context.Canceled).
func (c *cache[V]) get(key string, load func() (V, int64, error)) (V, error) {
	c.mu.Lock()
	if e, ok := c.entries[key]; ok {
		c.stats.Hits++
		e.seen = c.sweeps
		if e.elem != nil {
			c.lru.MoveToFront(e.elem)
		}
		c.mu.Unlock()
		<-e.done
		return e.val, e.err
	}
	c.stats.Misses++
	e := &entry[V]{key: key, done: make(chan struct{}), seen: c.sweeps}
	c.entries[key] = e
	c.mu.Unlock()

	e.val, e.size, e.err = load()
	close(e.done)

	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := errors.AsType[*fs.PathError](e.err); ok || errors.Is(e.err, context.Canceled) {
		delete(c.entries, key)
		return e.val, e.err
	}
	e.elem = c.lru.PushFront(e)
	c.used += e.size
	c.shrink()
	return e.val, e.err
}

// shrink evicts the least recently used entries until the rest fit the
// budget; the most recent one stays, whatever its size.
func (c *cache[V]) shrink() {
	for c.used > c.budget && c.lru.Len() > 1 {
		c.remove(c.lru.Back().Value.(*entry[V]))
	}
}

// remove evicts the loaded entry e.
func (c *cache[V]) remove(e *entry[V]) {
	c.lru.Remove(e.elem)
	delete(c.entries, e.key)
	c.used -= e.size
	c.stats.Evictions++
}

// sweep evicts the entries not used since the previous sweep, so a
// binary no longer run (an exited program, a replaced build) leaves the
// cache after one to two sweeps instead of waiting for the budget to
// push it out. measure, when not nil, sizes each entry kept again, for
// tables that grow as they are used; the cache then shrinks to the
// budget.
func (c *cache[V]) sweep(measure func(V) int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for el := c.lru.Front(); el != nil; {
		e := el.Value.(*entry[V])
		el = el.Next()
		if e.seen < c.sweeps {
			c.remove(e)
		} else if measure != nil && e.err == nil {
			size := measure(e.val)
			c.used += size - e.size
			e.size = size
		}
	}
	c.shrink()
	c.sweeps++
}

func (c *cache[V]) statistics() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Tables, s.Bytes = c.lru.Len(), c.used
	return s
}
