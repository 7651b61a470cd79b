package agent

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/sprof/sprof/internal/testenv"
)

// TestBPFAgent runs the real agent — BPF sampler, collector, symbolizer —
// for three intervals against a local Pyroscope, with a busy process to
// find in its profiles.
func TestBPFAgent(t *testing.T) {
	testenv.RequireRoot(t)
	sh, err := os.ReadFile("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	busy := filepath.Join(t.TempDir(), "sprofbusy")
	if err := os.WriteFile(busy, sh, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(busy, "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()

	rec, err := OpenBPF(BPFConfig{Frequency: 99, User: true, Kernel: true})
	if err != nil {
		t.Fatal(err)
	}
	// A cleanup, not a defer: cleanups run after the test function, in
	// reverse order, so the agent that start's cleanup stops is stopped
	// before its sampler is closed under it, also when the test fails.
	t.Cleanup(func() { rec.Close() })
	srv := newFakePyroscope(t)
	a, err := New(rec, Config{Interval: 500 * time.Millisecond, Pyroscope: pyroscopeConfig(srv.url())})
	if err != nil {
		t.Fatal(err)
	}
	const label = "__name__=process_cpu,env=prod,host=node-1,service_name=sprofbusy"
	busyPushes := func() []push {
		var out []push
		for _, p := range srv.received() {
			if p.labels == label {
				out = append(out, p)
			}
		}
		return out
	}
	stop := start(t, a)
	// Intervals come late on a loaded host: the agent's drains and cuts
	// wait for CPU like everything else.
	waitFor(t, "three intervals of sprofbusy", 40*time.Second, func() bool { return len(busyPushes()) >= 3 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	var samples int64
	for i, p := range busyPushes() {
		n := total(p.profile)
		samples += n
		found := false
		for _, m := range p.profile.Mapping {
			found = found || m.File == busy
		}
		if !found {
			t.Errorf("profile %d of sprofbusy has no mapping of %s", i, busy)
		}
		t.Logf("interval %d: %d samples over %v", i, n, time.Duration(p.profile.DurationNanos))
	}
	m := &a.metrics
	if samples == 0 || m.samples.Load() < uint64(samples) || m.pushesOK.Load() < 3 {
		t.Errorf("%d samples of sprofbusy, %d in all, %d pushes", samples, m.samples.Load(), m.pushesOK.Load())
	}
	if cs := rec.CacheStats(); cs.Misses == 0 {
		t.Errorf("the symbolizer read no binary: %+v", cs)
	}
	t.Logf("%d intervals, %d samples, %d lost, %d pushes, %d bytes; symbolizer cache %+v",
		m.intervals.Load(), m.samples.Load(), m.lost.Load(), m.pushesOK.Load(), m.bytesSent.Load(), rec.CacheStats())
}
