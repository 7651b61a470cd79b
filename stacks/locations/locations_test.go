package locations

import (
	"fmt"
	"slices"
	"testing"

	"github.com/sprof/sprof/stacks"
)

type fakeKernel map[uint64]string

func (k fakeKernel) Symbolize(dst []stacks.Frame, addr uint64) []stacks.Frame {
	if name, ok := k[addr]; ok {
		dst = append(dst, stacks.Frame{Function: name})
	}
	return dst
}

func TestTable(t *testing.T) {
	p := &stacks.Profile{}
	tab := New(p, fakeKernel{0x1000: "leaf", 0x1fff: "caller"})

	leaf := tab.Kernel(0x1000, false)
	ret := tab.Kernel(0x2000, true) // a return address: looked up at 0x1fff
	if leaf.Frames[0].Function != "leaf" || ret.Frames[0].Function != "caller" || ret.Address != 0x2000 {
		t.Fatalf("kernel locations: %+v, %+v", leaf, ret)
	}
	if k := leaf.Mapping; k != ret.Mapping || k.Start != 0x1000 || k.Limit != 0x2001 {
		t.Fatalf("kernel mapping %+v does not span both addresses", k)
	}
	if tab.Kernel(0x1000, false) != leaf || tab.Kernel(0x1000, true) == leaf {
		t.Fatal("a leaf and a return address at one place must be distinct Locations, each made once")
	}

	m := tab.AddMapping(&stacks.Mapping{Kind: stacks.User, File: "/bin/x", Start: 0x400000, Limit: 0x500000})
	calls := 0
	sym := func(dst []stacks.Frame, at uint64) []stacks.Frame {
		calls++
		if at != 0x400fff {
			t.Errorf("user return address looked up at %#x, want 0x400fff", at)
		}
		return append(dst, stacks.Frame{Function: "f"})
	}
	u := tab.User(m, 0x401000, true, sym)
	if tab.User(m, 0x401000, true, sym) != u || calls != 1 {
		t.Fatalf("symbolized %d times, want once", calls)
	}
	if unk := tab.Unknown(0x42); unk.Mapping.Kind != stacks.Unknown || unk.Symbolized() {
		t.Fatalf("unknown location %+v", unk)
	}
	if len(p.Mappings) != 3 {
		t.Fatalf("profile lists %d mappings, want kernel, user and unknown", len(p.Mappings))
	}
	if tab.ID(leaf) == tab.ID(ret) || tab.ID(u) != 3 {
		t.Fatalf("IDs not dense and distinct: %d %d %d", tab.ID(leaf), tab.ID(ret), tab.ID(u))
	}
}

// TestDeferred: UserDeferred Locations are named by Symbolize, each
// mapping's addresses in one batch, return addresses inside their call.
func TestDeferred(t *testing.T) {
	p := &stacks.Profile{}
	tab := New(p, nil)
	m1 := tab.AddMapping(&stacks.Mapping{Kind: stacks.User, File: "/bin/a"})
	m2 := tab.AddMapping(&stacks.Mapping{Kind: stacks.User, File: "/bin/b"})
	var batches [][]uint64
	sym := func(ats []uint64, fn func(i int, frames []stacks.Frame)) {
		batches = append(batches, append([]uint64(nil), ats...))
		for i := len(ats) - 1; i >= 0; i-- { // any order
			if ats[i] != 0x30 {
				fn(i, []stacks.Frame{{Function: fmt.Sprintf("f%x", ats[i])}})
			}
		}
	}
	a := tab.UserDeferred(m1, 0x10, false, sym)
	b := tab.UserDeferred(m1, 0x21, true, sym)
	c := tab.UserDeferred(m2, 0x30, false, sym)
	if tab.UserDeferred(m1, 0x10, false, sym) != a || a.Symbolized() {
		t.Fatal("a deferred Location is made once and named only by Symbolize")
	}
	tab.Symbolize()
	if len(batches) != 2 || !slices.Equal(batches[0], []uint64{0x10, 0x20}) || !slices.Equal(batches[1], []uint64{0x30}) {
		t.Fatalf("batches %x, want [10 20] and [30]", batches)
	}
	if a.Frames[0].Function != "f10" || b.Frames[0].Function != "f20" || c.Symbolized() {
		t.Fatalf("frames %+v %+v %+v", a.Frames, b.Frames, c.Frames)
	}
	tab.Symbolize()
	if len(batches) != 2 {
		t.Fatal("Symbolize named the same Locations again")
	}
}
