package collector

import (
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
