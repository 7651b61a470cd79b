package jit

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func TestTableNewestWins(t *testing.T) {
	var tb Table
	tb.Add(Symbol{Start: 0x1000, Size: 0x100, Name: "old"})
	tb.Add(Symbol{Start: 0x2000, Size: 0x100, Name: "other"})
	if s := tb.Lookup(0x1080); s == nil || s.Name != "old" {
		t.Fatalf("Lookup(0x1080) = %v, want old", s)
	}
	// Code reused: a new function over the middle of the old one.
	tb.Add(Symbol{Start: 0x1040, Size: 0x40, Name: "new"})
	for _, c := range []struct {
		addr uint64
		want string
	}{{0x1000, "old"}, {0x103f, "old"}, {0x1040, "new"}, {0x107f, "new"}, {0x1080, "old"}, {0x10ff, "old"},
		{0x1100, ""}, {0xfff, ""}, {0x2000, "other"}, {0x20ff, "other"}, {0x2100, ""}} {
		got := ""
		if s := tb.Lookup(c.addr); s != nil {
			got = s.Name
		}
		if got != c.want {
			t.Errorf("Lookup(%#x) = %q, want %q", c.addr, got, c.want)
		}
	}
	if tb.At(0x1040) == nil || tb.At(0x1000) == nil || tb.At(0x1080) != nil {
		t.Errorf("At: want symbols exactly at 0x1000 and 0x1040 only")
	}
}

func TestTableDropsInvalid(t *testing.T) {
	var tb Table
	tb.Add(Symbol{Start: 0x1000, Size: 0, Name: "empty"})
	tb.Add(Symbol{Start: ^uint64(0) - 1, Size: 4, Name: "wraps"})
	long := make([]byte, MaxName+10)
	for i := range long {
		long[i] = 'x'
	}
	tb.Add(Symbol{Start: 0x10, Size: 1, Name: string(long)})
	if tb.Len() != 1 || tb.Dropped() != 2 {
		t.Fatalf("Len %d Dropped %d, want 1 and 2", tb.Len(), tb.Dropped())
	}
	if s := tb.Lookup(0x10); s == nil || len(s.Name) != MaxName {
		t.Fatalf("long name not cut to %d bytes", MaxName)
	}
}

// TestTableMatchesNaive checks the merged segments against painting every
// byte, newest last, over random overlapping symbols added in batches.
func TestTableMatchesNaive(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		var tb Table
		owner := map[uint64]string{}
		for i := range 1 + r.IntN(40) {
			s := Symbol{Start: uint64(r.IntN(512)), Size: uint64(1 + r.IntN(64)), Name: fmt.Sprint(i)}
			tb.Add(s)
			for a := s.Start; a < s.End(); a++ {
				owner[a] = s.Name
			}
			if r.IntN(4) == 0 { // settle between batches now and then
				tb.Lookup(0)
			}
		}
		for a := uint64(0); a < 600; a++ {
			got := ""
			if s := tb.Lookup(a); s != nil {
				got = s.Name
			}
			if got != owner[a] {
				t.Fatalf("round %d: Lookup(%d) = %q, want %q", round, a, got, owner[a])
			}
		}
	}
}

func TestLineAt(t *testing.T) {
	s := Symbol{Start: 0x100, Size: 0x100, Lines: []Line{{0x10, "a.js", 3}, {0x40, "a.js", 4}}}
	for _, c := range []struct {
		addr uint64
		want int
	}{{0x100, 0}, {0x10f, 0}, {0x110, 3}, {0x13f, 3}, {0x140, 4}, {0x1ff, 4}} {
		got := 0
		if l := s.LineAt(c.addr); l != nil {
			got = l.Line
		}
		if got != c.want {
			t.Errorf("LineAt(%#x) = %d, want %d", c.addr, got, c.want)
		}
	}
}
