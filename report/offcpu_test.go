package report

import (
	"bytes"
	"testing"
	"time"

	"github.com/sprof/sprof/cbf/recording"
)

// TestOffCPU reads a recording with CPU samples and off-CPU records of the
// same stack: one sample carries both, and the profile says it has
// off-CPU time. Without CPU samples (frequency 0) it has no period.
func TestOffCPU(t *testing.T) {
	for _, hz := range []uint64{99, 0} {
		var buf bytes.Buffer
		start := time.Unix(1_700_000_000, 0)
		w, err := recording.NewWriter(&buf, recording.Options{Frequency: hz, Start: start, Clock: func() time.Time { return start }})
		if err != nil {
			t.Fatal(err)
		}
		user := []uint64{0x401000, 0x402000}
		if hz > 0 {
			for i := range 3 {
				if err := w.Sample(start.Add(time.Duration(i)*time.Millisecond), 10, 11, 0, "app", user, nil, 0, 1); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, ns := range []uint64{5e6, 7e6} {
			if err := w.OffCPU(start.Add(10*time.Millisecond), 10, 11, 1, "app", user, nil, 0, ns); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		p, res, err := Read(&buf, Options{})
		if err != nil {
			t.Fatal(err)
		}
		wantCount, wantPeriod := int64(3), time.Second/99
		if hz == 0 {
			wantCount, wantPeriod = 0, 0
		}
		if !p.OffCPU || p.Period != wantPeriod || len(p.Samples) != 1 || p.Samples[0].Count != wantCount ||
			p.Samples[0].OffCPU != 12*time.Millisecond || res.Kept != uint64(wantCount) || res.OffCPUKept != 2 {
			t.Errorf("%d Hz: profile off-CPU %v period %v, kept %d, samples %+v", hz, p.OffCPU, p.Period, res.Kept, p.Samples)
		}
	}
}
