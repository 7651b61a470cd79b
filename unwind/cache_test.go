package unwind

import (
	"slices"
	"testing"
)

// The cache keeps its tables within the budget, dropping the least
// recently used; a table larger than the budget is not kept at all.
func TestTableCache(t *testing.T) {
	c := NewTableCache[string](100)
	add := func(k string, size int64, wantEvicted ...string) *Cached[string] {
		t.Helper()
		e, evicted := c.Add(k, size)
		if e == nil || e.Key != k {
			t.Fatalf("Add(%s, %d) = %v, want its entry", k, size, e)
		}
		if !slices.Equal(evicted, wantEvicted) {
			t.Fatalf("Add(%s, %d) evicted %q, want %q", k, size, evicted, wantEvicted)
		}
		return e
	}
	a := add("a", 40)
	add("b", 40)
	c.Use(a) // b is now the least recently used
	add("c", 30, "b")
	if c.Len() != 2 || c.Bytes() != 70 || c.Evicted() != 1 {
		t.Errorf("len %d, bytes %d, evicted %d; want 2, 70, 1", c.Len(), c.Bytes(), c.Evicted())
	}
	add("d", 100, "a", "c") // oldest first; the new table alone fits
	if c.Len() != 1 || c.Bytes() != 100 {
		t.Errorf("len %d, bytes %d; want 1, 100", c.Len(), c.Bytes())
	}
	c.Use(a) // evicted already: ignored
	if e, evicted := c.Add("huge", 101); e != nil || evicted != nil {
		t.Errorf("Add of a table over the budget = %v, evicting %q; want neither", e, evicted)
	}
	if c.Len() != 1 || c.Evicted() != 3 {
		t.Errorf("after the refused table: len %d, evicted %d; want 1, 3", c.Len(), c.Evicted())
	}
	c.Use(nil)
}

// BenchmarkTableCacheUse is what marking a table in use costs the
// unwinder, per mapping a sample's frames fall in.
func BenchmarkTableCacheUse(b *testing.B) {
	c := NewTableCache[int](1 << 30)
	es := make([]*Cached[int], 64)
	for i := range es {
		es[i], _ = c.Add(i, 1<<20)
	}
	i := 0
	for b.Loop() {
		c.Use(es[i&63])
		i++
	}
}
