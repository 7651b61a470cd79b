package agent

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sprof/sprof/internal/testenv"
	"github.com/sprof/sprof/internal/unwindcheck"
	"github.com/sprof/sprof/pipeline"
	"github.com/sprof/sprof/stacks"
	"github.com/sprof/sprof/symbolize"
)

// capture is a Recorder that keeps the profiles the agent resolves.
type capture struct {
	*BPF
	mu       sync.Mutex
	profiles []*stacks.Profile
}

func (c *capture) Cut() Interval { return &capturedInterval{Interval: c.BPF.Cut(), c: c} }

func (c *capture) taken() []*stacks.Profile {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*stacks.Profile(nil), c.profiles...)
}

type capturedInterval struct {
	Interval
	c *capture
}

func (iv *capturedInterval) Resolve(ctx context.Context) *stacks.Profile {
	p := iv.Interval.Resolve(ctx)
	iv.c.mu.Lock()
	iv.c.profiles = append(iv.c.profiles, p)
	iv.c.mu.Unlock()
	return p
}

// TestAgentUnwindsWithoutFramePointers runs the real agent host-wide, as
// `sprof agent` configures it by default (stack copies of every process
// that needs them), while the unwinding fixtures (-O2
// -fomit-frame-pointer, one with .sframe, one with .eh_frame only) spin
// in a callback of Debian libc's qsort, and wants the exact chain
// compare → libc → run → main in at least 99% of their samples: what
// record achieves.
func TestAgentUnwindsWithoutFramePointers(t *testing.T) {
	testenv.RequireRoot(t)
	for _, fx := range unwindcheck.Fixtures {
		t.Run(fx.Name, func(t *testing.T) {
			path := unwindcheck.Path(t, "..", fx.File)
			cmd := unwindcheck.Start(t, path)
			pid := uint32(cmd.Process.Pid)
			// No debug directories: libc6-dbg would cost seconds and the
			// chain names only the fixture's functions.
			sym := symbolize.NewELF(symbolize.Options{DebugDirs: []string{t.TempDir()}})
			rec, err := OpenBPF(pipeline.Config{Frequency: 99, User: true, Kernel: true, StackCopy: pipeline.DefaultStackCopy, Symbolizer: sym})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { rec.Close() })
			c := &capture{BPF: rec}
			a, err := New(c, Config{Interval: time.Second, OutputDir: t.TempDir(), FlushTimeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			stop := start(t, a)
			// The fixture spins on one CPU: 200 samples take 2 s on an
			// idle host, longer on a loaded one.
			samples := func() (all int64) {
				for _, p := range c.taken() {
					_, n, _ := unwindcheck.Share(p, pid, path)
					all += n
				}
				return all
			}
			waitFor(t, "200 samples of the fixture", 60*time.Second, func() bool { return samples() >= 200 })
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			var good, all int64
			bad := map[string]int64{}
			for _, p := range c.taken() {
				share, n, others := unwindcheck.Share(p, pid, path)
				good += int64(share*float64(n) + 0.5)
				all += n
				for chain, k := range others {
					bad[chain] += k
				}
			}
			share := float64(good) / float64(all)
			t.Logf("%d samples of the fixture in %d intervals, %.2f%% with the known chain", all, len(c.taken()), 100*share)
			if share < 0.99 {
				t.Errorf("%.2f%% of the samples show compare → libc → run → main, want ≥ 99%%; others: %v", 100*share, bad)
			}
			if us := a.metrics.unwind.Load(); us == nil || us.Copies == 0 {
				t.Errorf("the agent's metrics count no stack copy: %+v", us)
			}
		})
	}
}
