package unwind

// TableCache bounds the memory of the unwind tables kept: a table is added
// once built, counted at its size (sframe.Table.MemSize), and when the
// tables outgrow the budget the least recently used go, to be built again
// if a sample needs them. K is the caller's key for a binary's table.
//
// A table in use is marked through the *Cached handle Add returned, a
// field write per lookup rather than a map lookup: the unwinder marks a
// table for every mapping a sample's frames fall in. A TableCache is not
// safe for concurrent use; the drain owns it.
type TableCache[K any] struct {
	budget  int64
	bytes   int64
	clock   uint64
	tables  []*Cached[K]
	evicted int
}

// Cached is one table in a TableCache.
type Cached[K any] struct {
	Key  K
	size int64
	used uint64 // the cache's clock at the last Use
	in   bool   // still in the cache
}

// NewTableCache returns a cache of at most budget bytes of tables.
func NewTableCache[K any](budget int64) *TableCache[K] {
	return &TableCache[K]{budget: budget}
}

// Budget returns the bytes of tables the cache keeps at most.
func (c *TableCache[K]) Budget() int64 { return c.budget }

// Len, Bytes and Evicted return the tables cached, their size, and how
// many were dropped to stay within the budget so far.
func (c *TableCache[K]) Len() int     { return len(c.tables) }
func (c *TableCache[K]) Bytes() int64 { return c.bytes }
func (c *TableCache[K]) Evicted() int { return c.evicted }

// Use marks e's table as used now; a nil e, or one evicted already, is
// ignored.
func (c *TableCache[K]) Use(e *Cached[K]) {
	if e != nil && e.in {
		c.clock++
		e.used = c.clock
	}
}

// Add caches k's table of size bytes as used now, and returns its handle
// and the keys of the tables evicted to make room, least recently used
// first. A table larger than the whole budget is not cached: Add returns
// nil, and the caller goes without it.
func (c *TableCache[K]) Add(k K, size int64) (*Cached[K], []K) {
	if size > c.budget {
		return nil, nil
	}
	c.clock++
	e := &Cached[K]{Key: k, size: size, used: c.clock, in: true}
	var evicted []K
	for c.bytes+size > c.budget && len(c.tables) > 0 {
		lru := 0
		for i, t := range c.tables {
			if t.used < c.tables[lru].used {
				lru = i
			}
		}
		old := c.tables[lru]
		c.tables[lru] = c.tables[len(c.tables)-1]
		c.tables[len(c.tables)-1] = nil
		c.tables = c.tables[:len(c.tables)-1]
		old.in = false
		c.bytes -= old.size
		c.evicted++
		evicted = append(evicted, old.Key)
	}
	c.tables = append(c.tables, e)
	c.bytes += size
	return e, evicted
}
