package collector

import (
	"io"
	"maps"
	"testing"

	"github.com/sprof/sprof/symbolize/cpython"
)

// TestCodeEndPassesPythonFrames: Python frames spliced into a stack
// (tagged addresses in no mapping) neither cut it nor stand for its PC;
// data after them still does.
func TestCodeEndPassesPythonFrames(t *testing.T) {
	s := &mapSet{}
	s.insert(mapping{start: 0x1000, limit: 0x3000, bin: &binaryFile{name: "/usr/bin/python3.11"}})
	py := uint64(cpython.FrameTag | 0x7f0000001000)
	for _, tc := range []struct {
		user []uint64
		want int
	}{
		{[]uint64{0x1000, py, py, 0x2000, 0x2100}, 5},
		{[]uint64{py, 0x1000, 0x2000}, 3},         // the PC in the evaluator: Python frames first
		{[]uint64{0x1000, py, 0x80_0000_0001}, 2}, // data after a Python frame
		{[]uint64{py, 0x9000, 0x80_0000_0001}, 3}, // the PC in no mapping: kept whole
	} {
		if got := codeEnd(s, tc.user); got != tc.want {
			t.Errorf("codeEnd(%x) = %d, want %d", tc.user, got, tc.want)
		}
	}
}

// TestSpliceUnreadPython: a CPU sample of a known Python process that
// runs the evaluator but carries no Python part (taken before the process
// was marked), or a part without a frame (the sampler found no thread
// state for the thread), is marked truncated, not shown whole without its
// Python frames; one outside the evaluator and an off-CPU one (which never
// carries Python frames) stay whole.
func TestSpliceUnreadPython(t *testing.T) {
	const pid = 7
	inEval, elsewhere := []uint64{0x5000, 0x1100, 0x6000}, []uint64{0x5000, 0x6000}
	for _, tc := range []struct {
		name      string
		user      []uint64
		read      bool
		offCPU    uint64
		truncated bool
	}{
		{"unread in the evaluator", inEval, false, 0, true},
		{"unread elsewhere", elsewhere, false, 0, false},
		{"unread off-CPU", inEval, false, 1000, false},
		{"read, no Python frame in the evaluator", inEval, true, 0, true},
		{"read, no Python frame elsewhere", elsewhere, true, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Collector{py: newPythons("/proc")}
			c.py.byPid[pid] = &pythonProcess{proc: &cpython.Process{Eval: []cpython.Range{{Start: 0x1000, Limit: 0x2000}}}}
			p := &pending{key: stackKey{pid: pid}, pyRead: tc.read, offCPU: tc.offCPU}
			got := c.splicePython(p, tc.user, nil)
			if len(got) != len(tc.user) || p.key.truncated != tc.truncated {
				t.Errorf("splice: %d frames, truncated %v; want %d, %v", len(got), p.key.truncated, len(tc.user), tc.truncated)
			}
			if want := map[bool]int{true: 1}[tc.truncated]; c.py.stats.Unread != want {
				t.Errorf("Unread = %d, want %d", c.py.stats.Unread, want)
			}
		})
	}
}

// namerCalls counts the code objects told to it, per pid and address.
type namerCalls map[[2]uint64]int

func (n namerCalls) PythonNamed(pid uint32, code uint64) error {
	n[[2]uint64{uint64(pid), code}]++
	return nil
}

// unreadable is process memory that cannot be read.
type unreadable struct{}

func (unreadable) ReadAt([]byte, int64) (int, error) { return 0, io.EOF }

// TestPythonToldWhenFresh: the sampler is told the innermost frame's code
// object of each sample it marked fresh (PythonFresh), without the entry
// bit, whether or not the name could be read (a code object that cannot
// be read would wake the collector for good), once a drain however many
// samples of the drain are marked (a system call each), and again in a
// later drain when a sample is marked again (the sampler forgot the code
// object); the code objects of samples not marked are not told.
func TestPythonToldWhenFresh(t *testing.T) {
	const pid = 7
	c := &Collector{py: newPythons("/proc")}
	told := namerCalls{}
	c.py.namer = told
	proc := &cpython.Process{}
	c.py.byPid[pid] = &pythonProcess{proc: proc, reader: cpython.NewReader(unreadable{}, proc),
		names: map[uint64]cpython.Frame{}, told: map[uint64]uint64{}}
	first := []uint64{0x1000 | cpython.EntryFlag, 0x1010, 0x2000, 0x2020}
	second := []uint64{0x3000, 0x3030, 0x2000, 0x2020}
	splice := func(words []uint64, fresh bool) {
		p := &pending{key: stackKey{pid: pid}, pyRead: true, pyFresh: fresh}
		c.splicePython(p, []uint64{0x5000}, words)
	}
	for _, drain := range []struct {
		samples func()
		want    namerCalls
	}{
		{func() { splice(first, true); splice(first, true); splice(second, false) },
			namerCalls{{pid, 0x1000}: 1}},
		{func() { splice(first, true); splice(second, true); splice(second, true) },
			namerCalls{{pid, 0x1000}: 2, {pid, 0x3000}: 1}},
	} {
		c.py.drain++
		drain.samples()
		if !maps.Equal(told, drain.want) {
			t.Errorf("drain %d: told %v, want %v", c.py.drain, told, drain.want)
		}
	}
	if c.py.stats.Unnamed != 12 {
		t.Errorf("Unnamed = %d, want 12: two frames unreadable in each of six samples", c.py.stats.Unnamed)
	}
}
