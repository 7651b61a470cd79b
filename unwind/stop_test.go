package unwind

import (
	"strings"
	"testing"

	"github.com/sprof/sprof/sframe"
)

// TestStopsFromSFrame: every stop reason of sframe.Unwinder has a Stop
// with a name, and only the outermost frame leaves a whole stack.
func TestStopsFromSFrame(t *testing.T) {
	for r := sframe.StopOutermost; r <= sframe.StopFull; r++ {
		s := FromSFrame(r)
		if s == 0 || strings.HasPrefix(s.String(), "Stop(") {
			t.Errorf("%v: Stop %v", r, s)
		}
		if s.Truncated() != (r != sframe.StopOutermost) {
			t.Errorf("%v: truncated %v", r, s.Truncated())
		}
	}
	if s := FromSFrame(sframe.StopFull + 1); !s.Truncated() {
		t.Errorf("an unknown reason gives %v, which is whole", s)
	}
	for s := Outermost; s < NumStops; s++ {
		if strings.HasPrefix(s.String(), "Stop(") {
			t.Errorf("Stop %d has no name", s)
		}
	}
}
