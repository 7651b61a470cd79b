package collector

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sprof/sprof/unwind"
)

// TestUnwindChoice checks the rule that picks the userspace unwind or the
// BPF walk for a sample with a stack copy.
func TestUnwindChoice(t *testing.T) {
	const depth = 8
	u, set, c := benchStack(t, depth)
	full, stop := u.unwind(1, set, &c)
	if len(full) != depth || stop != unwind.Outermost {
		t.Fatalf("%d frames, stop %v; want %d, outermost", len(full), stop, depth)
	}
	full = slices.Clone(full)
	garbage := append(slices.Clone(full[:2]), 0xdead, 0xbeef, 0xf00d, 1, 2, 3, 4, 5)
	// A copy cut after the third frame's return address.
	short := c
	short.n = 16 + 24
	for _, tc := range []struct {
		name    string
		copy    stackCopy
		bpf     []uint64
		want    []uint64
		wantBPF bool
	}{
		{"outermost beats a longer BPF walk", c, garbage, full, false},
		{"a stopped unwind beats a BPF walk that disagrees", short, garbage, full[:3], false},
		{"a BPF walk that agrees continues a stopped unwind", short, full, full, true},
	} {
		us, stop := u.unwind(1, set, &tc.copy)
		before := u.stats.BPF
		got, userspace, _ := u.account(set, us, stop, tc.bpf)
		if !slices.Equal(got, tc.want) || userspace == tc.wantBPF || (u.stats.BPF > before) != tc.wantBPF {
			t.Errorf("%s: got %x (userspace %v), want %x", tc.name, got, userspace, tc.want)
		}
	}
	// Frame pointers only: the BPF walk, which knows leaf prologues.
	for _, in := range u.infos() {
		in.table, in.framePointers = nil, true
	}
	for i := range set.maps {
		set.maps[i].bin = &binaryFile{name: set.maps[i].bin.name}
		in := u.info(&set.maps[i])
		in.classified, in.readable, in.built, in.framePointers = true, true, true, true
	}
	bpf := []uint64{full[0], 0x1234}
	us, stop := u.unwind(1, set, &c)
	if got, userspace, _ := u.account(set, us, stop, bpf); userspace || !slices.Equal(got, bpf) {
		t.Errorf("frame pointers only: got %x (userspace %v), want the BPF walk %x", got, userspace, bpf)
	}
}

// TestConsider checks which processes are marked for stack copies: one
// mapping a C program built without frame pointers is, a Go program is
// not.
func TestConsider(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	fixture, err := filepath.Abs("../testdata/unwind/spin-ehframe")
	if err != nil {
		t.Fatal(err)
	}
	marker := map[uint32]bool{}
	u := newUnwinder(newFiles("/proc"), 0, false, true, nil)
	u.attach(markSource(func(pid uint32, on bool) error { marker[pid] = on; return nil }))
	pid := uint32(os.Getpid())
	for _, tc := range []struct {
		path string
		pid  uint32
		want bool
	}{
		{self, pid, false}, // this test, a Go binary
		{fixture, pid + 1, true},
	} {
		m := &mapping{start: 0x1000, limit: 0x2000, bin: &binaryFile{name: tc.path}}
		u.consider(tc.pid, m)
		if marker[tc.pid] != tc.want {
			t.Errorf("%s: marked %v, want %v (%s)", tc.path, marker[tc.pid], tc.want, u.info(m).tableText())
		}
	}
	u.exited(pid + 1)
	if marker[pid+1] {
		t.Errorf("pid %d still marked after its exit", pid+1)
	}
}

// markSource is a Source that only marks.
type markSource func(pid uint32, on bool) error

func (f markSource) SetCopy(pid uint32, on bool) error { return f(pid, on) }
func (markSource) Read(func(*Sample)) (int, error)     { return 0, nil }
func (markSource) Lost() (uint64, error)               { return 0, nil }
