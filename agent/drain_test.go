package agent

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sprof/sprof/stacks"
)

// slowRecorder is fakeRecorder whose first interval takes until release
// to resolve, as the first interval of an agent converts every binary a
// host runs to GSYM. It notes when each drain and cut happen.
type slowRecorder struct {
	fakeRecorder
	release    chan struct{}
	converting chan struct{} // closed when the first Resolve starts
	enough     chan struct{} // closed at the wantDrains-th drain
	wantDrains int

	mu           sync.Mutex
	drainTimes   []time.Time
	cutTimes     []time.Time
	resolveStart time.Time
}

func (r *slowRecorder) Drain() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drainTimes = append(r.drainTimes, time.Now())
	if len(r.drainTimes) == r.wantDrains {
		close(r.enough)
	}
	return nil
}

func (r *slowRecorder) Cut() Interval {
	r.mu.Lock()
	first := len(r.cutTimes) == 0
	r.cutTimes = append(r.cutTimes, time.Now())
	r.mu.Unlock()
	iv := r.fakeRecorder.Cut()
	if !first {
		return iv
	}
	return &slowInterval{Interval: iv, r: r}
}

type slowInterval struct {
	Interval
	r *slowRecorder
}

func (iv *slowInterval) Resolve(ctx context.Context) *stacks.Profile {
	iv.r.mu.Lock()
	iv.r.resolveStart = time.Now()
	iv.r.mu.Unlock()
	close(iv.r.converting)
	<-iv.r.release
	return iv.Interval.Resolve(ctx)
}

// TestDrainsWhileConverting: while the agent names its first interval's
// frames for a long time, its drains keep their period — no gap between
// two drains exceeds twice the drain period — and intervals are cut on
// time. The clock is synctest's, so the test does not depend on the
// host's load.
func TestDrainsWhileConverting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const period, interval = 250 * time.Millisecond, time.Second
		rec := &slowRecorder{release: make(chan struct{}), converting: make(chan struct{}), enough: make(chan struct{}), wantDrains: 60}
		a, err := New(rec, Config{Interval: interval, DrainEvery: period, ProcRoot: fakeProc(t), OutputDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- a.Run(ctx) }()
		<-rec.converting
		<-rec.enough // 15 s of drains, most of them while the first interval converts
		close(rec.release)
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}

		rec.mu.Lock()
		defer rec.mu.Unlock()
		during := 0
		for i := 1; i < len(rec.drainTimes); i++ {
			if gap := rec.drainTimes[i].Sub(rec.drainTimes[i-1]); gap > 2*period {
				t.Errorf("drains %d and %d are %v apart, more than twice the %v period", i-1, i, gap, period)
			}
			if rec.drainTimes[i].After(rec.resolveStart) {
				during++
			}
		}
		if during < 50 {
			t.Errorf("%d drains while the first interval converted, want the 50 of 12.5 s", during)
		}
		for i := 1; i < len(rec.cutTimes)-1; i++ { // the last cut is at the stop
			if gap := rec.cutTimes[i].Sub(rec.cutTimes[i-1]); gap != interval {
				t.Errorf("cuts %d and %d are %v apart, want the %v interval exactly", i-1, i, gap, interval)
			}
		}
		if n := a.metrics.intervals.Load(); n != uint64(len(rec.cutTimes)) {
			t.Errorf("%d intervals converted of %d cut", n, len(rec.cutTimes))
		}
	})
}

// TestExitWhileConverting: stopped while the first interval's binaries
// are still being read, the agent returns FlushTimeout after the stop and
// writes the intervals cut after that one, frames unnamed where naming had
// not come; the one being named is dropped.
func TestExitWhileConverting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const flush = 3 * time.Second
		rec := &slowRecorder{release: make(chan struct{}), converting: make(chan struct{}), enough: make(chan struct{}), wantDrains: 20}
		a, err := New(rec, Config{Interval: time.Second, DrainEvery: 250 * time.Millisecond, ProcRoot: fakeProc(t), OutputDir: t.TempDir(), FlushTimeout: flush})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- a.Run(ctx) }()
		<-rec.converting
		<-rec.enough
		cancel()
		stopped := time.Now()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if took := time.Since(stopped); took != flush {
			t.Errorf("Run returned %v after the stop, want FlushTimeout, %v", took, flush)
		}
		rec.mu.Lock()
		cuts := len(rec.cutTimes)
		rec.mu.Unlock()
		if n := a.metrics.intervals.Load(); n != uint64(cuts-1) {
			t.Errorf("%d intervals written of %d cut; want all but the one being named", n, cuts)
		}
		close(rec.release) // the first interval's naming ends, after Run
		synctest.Wait()
		if n := a.metrics.intervals.Load(); n != uint64(cuts-1) {
			t.Errorf("%d intervals written once the first was named; want it dropped", n)
		}
	})
}

// builtRecorder is fakeRecorder with tables built in the background: a
// send on built says one is done.
type builtRecorder struct {
	fakeRecorder
	built chan struct{}
}

func (r *builtRecorder) TablesBuilt() <-chan struct{} { return r.built }

// TestDrainsWhenTablesBuilt: the agent drains when its recorder says an
// unwind table is done, not only at its drain period (an hour here), so
// that a new binary's table reaches the kernel at once.
func TestDrainsWhenTablesBuilt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &builtRecorder{built: make(chan struct{})}
		a, err := New(rec, Config{Interval: time.Hour, DrainEvery: time.Hour, ProcRoot: fakeProc(t), OutputDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- a.Run(ctx) }()
		for want := 1; want <= 2; want++ {
			rec.built <- struct{}{}
			synctest.Wait()
			rec.mu.Lock()
			drains := rec.drains
			rec.mu.Unlock()
			if drains != want {
				t.Errorf("%d drains after %d tables built, want %d", drains, want, want)
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}
