package symbolize

import (
	"container/list"
	"errors"
	"io/fs"
	"sync"
)

// cache holds loaded tables by key within a memory budget, evicting the
// least recently used. A table is loaded once: concurrent callers for the
// same key wait for the first one's result instead of loading it again.
type cache[V any] struct {
	mu      sync.Mutex
	budget  int64
	used    int64
	entries map[string]*entry[V]
	lru     list.List // of *entry[V], most recently used first
	stats   CacheStats
}

type entry[V any] struct {
	key  string
	done chan struct{}
	val  V
	err  error
	size int64
	elem *list.Element
}

// CacheStats counts the work of a symbolizer's table cache.
type CacheStats struct {
	// Hits and Misses count lookups that found a table and lookups that
	// had to load one (each miss reads one binary).
	Hits, Misses uint64
	// Evictions counts tables dropped to stay within the budget.
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
// file not yet readable) are not, so the next caller tries again.
func (c *cache[V]) get(key string, load func() (V, int64, error)) (V, error) {
	c.mu.Lock()
	if e, ok := c.entries[key]; ok {
		c.stats.Hits++
		if e.elem != nil {
			c.lru.MoveToFront(e.elem)
		}
		c.mu.Unlock()
		<-e.done
		return e.val, e.err
	}
	c.stats.Misses++
	e := &entry[V]{key: key, done: make(chan struct{})}
	c.entries[key] = e
	c.mu.Unlock()

	e.val, e.size, e.err = load()
	close(e.done)

	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := errors.AsType[*fs.PathError](e.err); ok {
		delete(c.entries, key)
		return e.val, e.err
	}
	e.elem = c.lru.PushFront(e)
	c.used += e.size
	for c.used > c.budget && c.lru.Len() > 1 {
		old := c.lru.Back().Value.(*entry[V])
		c.lru.Remove(old.elem)
		delete(c.entries, old.key)
		c.used -= old.size
		c.stats.Evictions++
	}
	return e.val, e.err
}

func (c *cache[V]) statistics() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Tables, s.Bytes = c.lru.Len(), c.used
	return s
}
