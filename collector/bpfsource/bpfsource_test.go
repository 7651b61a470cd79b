package bpfsource_test

import (
	"context"
	"debug/elf"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/sprof/sprof/bpf"
	"github.com/sprof/sprof/collector"
	"github.com/sprof/sprof/collector/bpfsource"
	"github.com/sprof/sprof/internal/testenv"
	"github.com/sprof/sprof/stacks"
	"github.com/sprof/sprof/symbolize"
	"github.com/sprof/sprof/symbolize/buildid"
)

// funcRange returns the file offsets [lo, hi) of function name in path.
func funcRange(t *testing.T, path, name string) (lo, hi uint64) {
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if s.Name != name {
			continue
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD && s.Value >= p.Vaddr && s.Value < p.Vaddr+p.Filesz {
				lo = s.Value - p.Vaddr + p.Off
				return lo, lo + s.Size
			}
		}
	}
	t.Fatalf("%s: no function %s", path, name)
	return 0, 0
}

// TestShortLivedEndToEnd samples a process of 100 ms of CPU with the real BPF
// sampler, filtered to its pid while another process spins, and expects
// its samples — and only its — attributed to its binary and build ID, most
// in its work function.
func TestShortLivedEndToEnd(t *testing.T) {
	testenv.RequireRoot(t)
	path, err := filepath.Abs("../../testdata/collector/shortlived")
	if err != nil {
		t.Fatal(err)
	}
	wantID, err := buildid.File(path)
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := funcRange(t, path, "work")

	spinner := exec.Command("sh", "-c", "while :; do :; done")
	if err := spinner.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { spinner.Process.Kill(); spinner.Wait() }()

	// The shell waits for a line before exec'ing the fixture, so the pid
	// is in the filter before the fixture's first instruction.
	target := exec.Command("sh", "-c", `read x; exec "$0"`, path)
	release, err := target.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := target.Start(); err != nil {
		t.Fatal(err)
	}
	pid := uint32(target.Process.Pid)

	const hz = 997
	kernel, err := symbolize.LoadKernel()
	if err != nil {
		t.Fatal(err)
	}
	c, err := collector.New(collector.Options{Frequency: hz, Pids: []uint32{pid}, FollowForks: true,
		Symbolizer: symbolize.NewELF(symbolize.Options{}), Kernel: kernel})
	if err != nil {
		t.Fatal(err)
	}
	s, err := bpf.Open(bpf.Config{Frequency: hz, Pids: []uint32{pid}, FollowForks: true, User: true, Kernel: true})
	if err != nil {
		c.Close()
		target.Process.Kill()
		target.Wait()
		t.Fatal(err)
	}
	defer s.Close()
	exited := make(chan struct{})
	go func() {
		release.Write([]byte("go\n"))
		target.Wait()
		close(exited)
	}()
	// Run ends when the fixture has exited, after 100 ms of its CPU time
	// however long a loaded host takes to give it that.
	prof, st, err := c.Run(context.Background(), bpfsource.New(s), exited)
	if err != nil {
		t.Fatal(err)
	}
	// Every sample with a user stack must be attributed to a file: the
	// fixture, or ld.so and libc while it starts and exits.
	var total, unknown, fixture, inWork int64
	for _, smp := range prof.Samples {
		if smp.Pid != pid {
			t.Errorf("sample of pid %d (%s) passed a filter for pid %d", smp.Pid, smp.Comm, pid)
			continue
		}
		var leaf *stacks.Location
		for _, l := range smp.Stack {
			if l.Mapping.Kind != stacks.Kernel {
				leaf = l
				break
			}
		}
		if leaf == nil {
			continue // in the kernel with no user context, as during exec
		}
		total += smp.Count
		m := leaf.Mapping
		t.Logf("%d × %s %s %v", smp.Count, smp.Comm, leaf.Placeholder(), leaf.Frames)
		switch {
		case m.Kind == stacks.Unknown:
			unknown += smp.Count
		case m.File == path:
			if m.BuildID != wantID {
				t.Errorf("fixture mapping with build ID %q, want %q", m.BuildID, wantID)
			}
			fixture += smp.Count
			if off := leaf.Address - m.Start + m.Offset; off >= lo && off < hi {
				inWork += smp.Count
				if n := len(leaf.Frames); n == 0 || leaf.Frames[n-1].Function != "work" {
					t.Errorf("leaf %s in work symbolized as %+v", leaf.Placeholder(), leaf.Frames)
				}
			}
		}
	}
	t.Logf("%d user samples: %d in the fixture, %d of them in work, %d unknown; stats %+v", total, fixture, inWork, unknown, st)
	// The fixture spins for 100 ms of its CPU time: about 100 samples at
	// 997 Hz on any host.
	if fixture < 50 {
		t.Fatalf("%d samples in the fixture binary at %d Hz", fixture, hz)
	}
	if unknown > 0 || inWork*2 < total {
		t.Fatalf("of %d samples %d unattributed (want 0), %d in work (want ≥ half)", total, unknown, inWork)
	}
}

// BenchmarkRecordSystemWide records the whole host for one second per
// iteration at 99 Hz, as `sprof record` does, and reports the collector's
// CPU time per sample and the BPF program's time per run.
func BenchmarkRecordSystemWide(b *testing.B) {
	testenv.RequireRoot(b)
	var samples uint64
	var busy, scan time.Duration
	var runs, runNs uint64
	for range b.N {
		began := time.Now()
		c, err := collector.New(collector.Options{Frequency: 99})
		if err != nil {
			b.Fatal(err)
		}
		scan += time.Since(began)
		s, err := bpf.Open(bpf.Config{Frequency: 99, User: true, Kernel: true, RunTimeStats: true})
		if err != nil {
			c.Close()
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, st, err := c.Run(ctx, bpfsource.New(s), nil)
		cancel()
		bs, _ := s.Stats()
		s.Close()
		if err != nil {
			b.Fatal(err)
		}
		samples += st.Samples
		busy += st.Busy
		runs += bs.RunCount
		runNs += bs.RunTimeNs
	}
	b.ReportMetric(float64(busy.Nanoseconds())/float64(max(samples, 1)), "ns/sample")
	b.ReportMetric(float64(samples)/float64(b.N), "samples/op")
	b.ReportMetric(float64(runNs)/float64(max(runs, 1)), "bpf-ns/run")
	b.ReportMetric(float64(scan.Milliseconds())/float64(b.N), "ms-scan/op")
}
