package collector

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/sprof/sprof/stacks"
	"github.com/sprof/sprof/symbolize"
)

// fakeSymbolizer names every address after its binary and file offset and
// records the lookups it was asked for.
type fakeSymbolizer struct {
	calls []string
	fail  string // binary name whose reads fail
}

func (f *fakeSymbolizer) Symbolize(dst []stacks.Frame, b symbolize.Binary, off uint64) ([]stacks.Frame, error) {
	f.calls = append(f.calls, fmt.Sprintf("%s+%#x", b.Name, off))
	if b.Name == f.fail {
		return dst, errors.New("unreadable")
	}
	return append(dst, stacks.Frame{Function: fmt.Sprintf("%s+%#x", b.Name, off)}), nil
}

type fakeKernel struct{}

func (fakeKernel) Symbolize(dst []stacks.Frame, addr uint64) []stacks.Frame {
	return append(dst, stacks.Frame{Function: fmt.Sprintf("k%#x", addr)})
}

// names returns a sample's stack as frame names, leaf first.
func names(s *stacks.Sample) []string {
	var out []string
	for _, l := range s.Stack {
		if l.Symbolized() {
			out = append(out, l.Frames[0].Function)
		} else {
			out = append(out, l.Placeholder())
		}
	}
	return out
}

func TestProfileBuilding(t *testing.T) {
	sym := &fakeSymbolizer{fail: "/bad"}
	c, err := New(Options{Frequency: 99, ProcRoot: t.TempDir(), NoSideband: true, Symbolizer: sym, Kernel: fakeKernel{}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Two processes run /app at the same address; one also maps /bad, the
	// other code of no file (a JIT's), where no name comes from.
	c.events = []event{
		mmapEvent(1, 10, 0x1000, 0x3000, 0x4000, "/app", []byte{0xaa}),
		{time: 1, kind: eventMmap, pid: 10, m: mapping{start: 0x9990000, limit: 0x99a0000}, anon: true},
		mmapEvent(1, 11, 0x1000, 0x3000, 0x4000, "/app", []byte{0xaa}),
		mmapEvent(1, 11, 0x8000, 0x9000, 0, "/bad", nil),
	}
	src := &fakeSource{}
	for range 3 {
		src.add(10, 5, 0x1000, 0x2000, 0x9999999)
	}
	src.add(11, 5, 0x2000, 0x8010)
	src.samples[3].Kernel = []uint64{0xffffffff81000000, 0xffffffff81000100}
	src.samples[3].UserTruncated = true
	if err := c.Drain(src); err != nil {
		t.Fatal(err)
	}
	p := c.Profile()
	if len(p.Samples) != 2 || p.Samples[0].Count != 3 || p.Samples[1].Count != 1 {
		t.Fatalf("got %d samples, want 2 with counts 3 and 1", len(p.Samples))
	}
	// The leaf is looked up at its address, return addresses one byte
	// earlier; locations keep the real address.
	if got, want := names(p.Samples[0]), []string{"/app+0x4000", "/app+0x4fff", "[unknown] 0x9999999"}; !slices.Equal(got, want) {
		t.Errorf("sample 0 = %q, want %q", got, want)
	}
	if got, want := names(p.Samples[1]), []string{"k0xffffffff81000000", "k0xffffffff810000ff", "/app+0x5000", "bad+0x10"}; !slices.Equal(got, want) {
		t.Errorf("sample 1 = %q, want %q", got, want)
	}
	if a := p.Samples[0].Stack[1].Address; a != 0x2000 {
		t.Errorf("return address kept as %#x, want 0x2000", a)
	}
	s1 := p.Samples[1]
	if !s1.Truncated || s1.Pid != 11 || s1.Comm != "p11" || p.Samples[0].Truncated {
		t.Errorf("sample 1 = pid %d comm %q truncated %v", s1.Pid, s1.Comm, s1.Truncated)
	}
	if p.Samples[0].Stack[0].Mapping != s1.Stack[2].Mapping {
		t.Error("two processes mapping /app at the same address got two Mappings")
	}
	kinds := map[stacks.MappingKind]int{}
	for _, m := range p.Mappings {
		kinds[m.Kind]++
	}
	if kinds[stacks.User] != 2 || kinds[stacks.Kernel] != 1 || kinds[stacks.Unknown] != 1 {
		t.Errorf("mappings by kind %v, want 2 user, 1 kernel, 1 unknown", kinds)
	}
	if p.Period.Nanoseconds() != 1000000000/99 {
		t.Errorf("period %v for 99 Hz", p.Period)
	}
	// Each distinct location is symbolized once; /bad fails once and is
	// not asked again.
	if len(sym.calls) != 4 {
		t.Errorf("symbolizer called %d times (%q), want 4", len(sym.calls), sym.calls)
	}
	if st := c.Stats(); st.SymbolizeErrors != 1 || st.Stacks != 2 || st.Samples != 4 {
		t.Errorf("stats %+v", st)
	}
}

// TestAggregateKeys checks what makes two samples the same.
func TestAggregateKeys(t *testing.T) {
	a := newAggregator()
	set1, set2 := &mapSet{id: 1}, &mapSet{id: 2}
	base := stackKey{set: set1, pid: 1, tid: 1}
	copy(base.comm[:], "x")
	user, kernel := []uint64{1, 2, 3}, []uint64{9}
	variants := []struct {
		name         string
		k            stackKey
		user, kernel []uint64
	}{
		{"base", base, user, kernel},
		{"other set", func() stackKey { k := base; k.set = set2; return k }(), user, kernel},
		{"other tid", func() stackKey { k := base; k.tid = 2; return k }(), user, kernel},
		{"other comm", func() stackKey { k := base; k.comm[0] = 'y'; return k }(), user, kernel},
		{"truncated", func() stackKey { k := base; k.truncated = true; return k }(), user, kernel},
		{"user word moved to kernel", base, []uint64{1, 2}, []uint64{3, 9}},
		{"no kernel", base, user, nil},
	}
	for _, v := range variants {
		h := a.hash(&v.k, v.user, v.kernel)
		if a.find(h, &v.k, v.user, v.kernel) >= 0 {
			t.Fatalf("%s: found before insertion", v.name)
		}
		a.insert(h, &v.k, v.user, v.kernel, 0)
	}
	for i, v := range variants {
		h := a.hash(&v.k, v.user, v.kernel)
		if got := a.find(h, &v.k, v.user, v.kernel); got != int32(i) {
			t.Errorf("%s: find = %d, want %d", v.name, got, i)
		}
	}
}

// BenchmarkAggregate measures the collector's userspace cost per sample
// in steady state: copying out of the ring, ordering, lookup in the process
// table and aggregation of 64-frame stacks, 1,000 distinct ones.
func BenchmarkAggregate(b *testing.B) {
	c, err := New(Options{Frequency: 99, ProcRoot: b.TempDir(), NoSideband: true})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	bin := c.table.files.fromMMap(1, 0, 0, "/app", []byte{1})
	for pid := uint32(1); pid <= 10; pid++ {
		c.table.mmap(pid, mapping{0x400000, 0x800000, 0, bin}, false)
	}
	const perDrain, depth = 1000, 64
	src := &fakeSource{}
	mk := func() {
		for i := range perDrain {
			user := make([]uint64, depth)
			for j := range user {
				user[j] = 0x400000 + uint64(i*depth+j)*16
			}
			src.add(uint32(i%10+1), uint64(i), user...)
		}
	}
	mk()
	samples := append([]Sample(nil), src.samples...)
	c.Drain(src)
	busy := c.Stats().Busy
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		src.samples = append(src.samples[:0], samples...)
		c.Drain(src)
	}
	// CPU time, as Stats.NsPerSample reports it; wall time on a shared
	// machine would measure the neighbours.
	b.ReportMetric(float64((c.Stats().Busy-busy).Nanoseconds())/float64(b.N*perDrain), "ns/sample")
}
