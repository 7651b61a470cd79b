package bpf

import (
	"errors"
	"os"
	"testing"

	"github.com/cilium/ebpf"
)

// newPidArray makes an array of a byte per pid like pids and pid_marks.
func newPidArray(t *testing.T) *ebpf.Map {
	t.Helper()
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4096,
		MaxEntries: pidLimit / 4096, Flags: 1024 /* BPF_F_MMAPABLE */})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// A pid's marks change one at a time, and what the memory map writes is
// what the map holds, at the pid's byte of its chunk.
func TestPidMarks(t *testing.T) {
	requireBPF(t)
	m := newPidArray(t)
	marks, err := mapPidBytes(m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { marks.close() })
	const pid = 3*4096 + 17
	steps := []struct {
		mark pidMark
		on   bool
		want byte
	}{
		{markCopy, true, 1},
		{markPython, true, 5},
		{markGo, true, 7},
		{markCopy, false, 6},
		{markPython, false, 2},
		{markGo, false, 0},
	}
	var chunk [4096]byte
	for _, st := range steps {
		if err := marks.mark(pid, st.mark, st.on); err != nil {
			t.Fatal(err)
		}
		if err := m.Lookup(uint32(pid/4096), &chunk); err != nil {
			t.Fatal(err)
		}
		for i, b := range chunk {
			want := byte(0)
			if i == pid%4096 {
				want = st.want
			}
			if b != want {
				t.Fatalf("after mark %d %t: byte %d of the pid's chunk is %#x, want %#x", st.mark, st.on, i, b, want)
			}
		}
	}
	for _, pid := range []uint32{0, pidLimit, 1 << 31} {
		if err := marks.mark(pid, markCopy, true); err == nil {
			t.Errorf("pid %d marked", pid)
		}
	}
	// The collector unmarks what it follows when it closes, after the
	// Sampler: an error, not a write into memory unmapped.
	for i := range 2 {
		if err := marks.close(); err != nil {
			t.Errorf("close %d: %v", i+1, err)
		}
	}
	if err := marks.mark(pid, markGo, false); !errors.Is(err, os.ErrClosed) {
		t.Errorf("mark after close: %v, want os.ErrClosed", err)
	}
	if err := marks.add(pid); !errors.Is(err, os.ErrClosed) {
		t.Errorf("add after close: %v, want os.ErrClosed", err)
	}
}
