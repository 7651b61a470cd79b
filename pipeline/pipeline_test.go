package pipeline

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/sprof/sprof/internal/proctime"
	"github.com/sprof/sprof/internal/testenv"
	"github.com/sprof/sprof/internal/unwindcheck"
	"github.com/sprof/sprof/symbolize"
)

// TestRunAndCut opens a pipeline on one fixture process (built without
// frame pointers), cuts one interval as the agent does and then runs it
// to its end as record does: both profiles hold the process's samples,
// unwound from stack copies down to main.
func TestRunAndCut(t *testing.T) {
	testenv.RequireRoot(t)
	path := unwindcheck.Path(t, "..", "spin-ehframe")
	cmd := unwindcheck.Start(t, path)
	pid := uint32(cmd.Process.Pid)
	p, err := Open(Config{Frequency: 499, Pids: []uint32{pid}, User: true, Kernel: true, StackCopy: DefaultStackCopy,
		Symbolizer: symbolize.NewELF(symbolize.Options{DebugDirs: []string{t.TempDir()}})})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.cfg.Command || p.cfg.StackCopy != DefaultStackCopy {
		t.Fatalf("config %+v", p.cfg)
	}
	// Drain until the interval holds samples of the fixture unwound in
	// userspace (samples wait while libc's table is built).
	// 50 samples at 499 Hz take 0.1 s of the fixture's CPU time; building
	// libc's table costs the pipeline a fraction of a second of CPU, and
	// the fixture runs about as long meanwhile on a loaded host.
	proctime.Until(t, cmd.Process.Pid, 20*time.Second, "50 samples unwound in userspace", func() bool {
		if err := p.Drain(); err != nil {
			t.Fatal(err)
		}
		return p.UnwindStats().Userspace >= 50
	})
	iv := p.Cut()
	cut := iv.Resolve(context.Background())
	share, n, bad := unwindcheck.Share(cut, pid, path)
	if n < 50 || share < 0.99 || iv.Stats().Samples < uint64(n) {
		t.Errorf("cut interval: %d samples of the fixture (stats %d), %.2f%% with the known chain; others %v", n, iv.Stats().Samples, 100*share, bad)
	}
	// 1 s of the fixture's CPU time, however long a loaded host takes to
	// give it that.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() {
		ran <- proctime.Wait(cmd.Process.Pid, time.Second)
		cancel()
	}()
	prof, stats, err := p.Run(ctx, context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	if _, n, _ := unwindcheck.Share(prof, pid, path); n == 0 || stats.Samples == 0 {
		t.Errorf("run: %d samples of the fixture, %d in all", n, stats.Samples)
	}
	if us := p.UnwindStats(); us.Copies == 0 || us.Userspace == 0 {
		t.Errorf("unwind stats %+v: want samples with copies unwound in userspace", us)
	}
	if bs, err := p.SamplerStats(); err != nil || bs.Sent == 0 {
		t.Errorf("sampler stats %+v, %v", bs, err)
	}
}

// closer is a Symbolizer that records being closed.
type closer struct {
	symbolize.Symbolizer
	once   sync.Once
	closed chan struct{}
}

func (c *closer) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

// Closing a pipeline closes its Symbolizer, which ends a GSYM conversion
// or download under way (symbolize.GSYM.Close); so does the end of names
// while Run names the frames, before the pipeline is closed.
func TestCloseClosesSymbolizer(t *testing.T) {
	testenv.RequireRoot(t)
	for _, run := range []bool{false, true} {
		sym := &closer{Symbolizer: symbolize.NewELF(symbolize.Options{}), closed: make(chan struct{})}
		p, err := Open(Config{Frequency: 19, Pids: []uint32{uint32(os.Getpid())}, User: true, Symbolizer: sym})
		if err != nil {
			t.Fatal(err)
		}
		if run {
			ctx, stop := context.WithCancel(context.Background())
			stop()
			if _, _, err := p.Run(ctx, ctx, nil); err != nil {
				t.Fatal(err)
			}
			<-sym.closed // by Run, in its own goroutine (context.AfterFunc)
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-sym.closed:
		default:
			t.Errorf("run %v: Close did not close the symbolizer", run)
		}
	}
}

// TestAutoFallsBackToCopy: UnwindAuto on a sampler that cannot be opened
// with its unwind tables (here a budget past the sampler's bound, where a
// host would refuse the kernel memory) opens it without them, with stack
// copies, and says why (and ProbeSampler, which check asks, refuses
// that budget and takes the default one); UnwindBPF, which has no copy to
// fall back on, fails.
func TestAutoFallsBackToCopy(t *testing.T) {
	testenv.RequireRoot(t)
	cfg := Config{Frequency: 19, Pids: []uint32{uint32(os.Getpid())}, User: true, StackCopy: DefaultStackCopy,
		Unwind: UnwindAuto, UnwindTables: 1 << 40}
	p, err := Open(cfg)
	if err != nil {
		t.Fatalf("auto: %v", err)
	}
	defer p.Close()
	if p.TablesErr == nil || p.cfg.Unwind != UnwindCopy || p.cfg.StackCopy != DefaultStackCopy {
		t.Errorf("auto without tables: TablesErr %v, unwind %v, stack copy %d; want an error, copy, %d", p.TablesErr, p.cfg.Unwind, p.cfg.StackCopy, DefaultStackCopy)
	}
	if err := ProbeSampler(cfg); err == nil {
		t.Errorf("ProbeSampler with tables the sampler refuses: nil")
	}
	cfg.UnwindTables = 0
	if err := ProbeSampler(cfg); err != nil {
		t.Errorf("ProbeSampler with the default tables: %v", err)
	}
	cfg.UnwindTables = 1 << 40
	cfg.Unwind = UnwindBPF
	if p, err := Open(cfg); err == nil {
		p.Close()
		t.Errorf("bpf with tables the sampler refuses: opened")
	}
}
