package bpfsource_test

import (
	"bufio"
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sprof/sprof/bpf"
	"github.com/sprof/sprof/collector"
	"github.com/sprof/sprof/collector/bpfsource"
	"github.com/sprof/sprof/internal/proctime"
	"github.com/sprof/sprof/internal/testenv"
	"github.com/sprof/sprof/internal/unwindcheck"
	"github.com/sprof/sprof/stacks"
	"github.com/sprof/sprof/symbolize"
)

const (
	accuracyHz = 999
	// accuracyCPU is the fixture's CPU time each recording samples, about
	// 2,000 samples however loaded the host is.
	accuracyCPU = 2 * time.Second
)

// TestUnwindAccuracy records the unwinding fixtures (-O2
// -fomit-frame-pointer, one with .sframe, one with .eh_frame only) with
// the real sampler and wants the exact chain compare → libc → run → main
// in at least 99.5% of the samples, for each place stacks are unwound:
//
//   - copy: the process marked for stack copies by the collector itself,
//     unwound in userspace;
//   - auto: the tables loaded into the kernel as they are built, the
//     copy until then;
//   - bpf: in the kernel only, counted once the collector has loaded the
//     fixture's tables (until then its frames end a stack, by design: a
//     drain with no table under way is the condition, not a time).
//
// Then perf records the same process with --call-graph dwarf, and
// sprof's share of samples that reach main must be at least perf's.
func TestUnwindAccuracy(t *testing.T) {
	testenv.RequireRoot(t)
	for _, mode := range []string{"copy", "auto", "bpf"} {
		for _, fx := range unwindcheck.Fixtures {
			t.Run(mode+"/"+fx.Name, func(t *testing.T) {
				path := unwindcheck.Path(t, "../..", fx.File)
				cmd := unwindcheck.Start(t, path)
				pid := uint32(cmd.Process.Pid)

				copies, tables := mode != "bpf", mode != "copy"
				col, err := collector.New(collector.Options{
					Frequency: accuracyHz, Pids: []uint32{pid}, StackCopy: copies, KernelTables: tables, DebugUnwind: true,
					// No debug directories: libc6-dbg would cost seconds and
					// the chain names only the fixture's functions.
					Symbolizer: symbolize.NewELF(symbolize.Options{DebugDirs: []string{t.TempDir()}}),
				})
				if err != nil {
					t.Fatal(err)
				}
				cfg := bpf.Config{Frequency: accuracyHz, Pids: []uint32{pid}, User: true, Kernel: true}
				if copies {
					cfg.StackCopy, cfg.CopyPids = 16<<10, col.CopyPids()
				}
				if tables {
					cfg.UnwindTables = bpf.DefaultUnwindTables
				}
				s, err := bpf.Open(cfg)
				if err != nil {
					col.Close()
					t.Fatal(err)
				}
				defer s.Close()
				prof, lost := recordAccuracy(t, col, bpfsource.New(s), int(pid), mode == "bpf")
				st := col.UnwindStats()
				var text bytes.Buffer
				st.WriteText(&text)
				share, all, bad := unwindcheck.Share(prof, pid, path)
				reach := unwindcheck.ReachMain(prof, pid, path)
				t.Logf("sprof: %d samples (%d lost), %.2f%% with the known chain, %.2f%% reach main\n%s", all, lost, 100*share, 100*reach, text.String())
				// About 2,000 (accuracyCPU at accuracyHz); far fewer means
				// the sampler or the pid filter lost the fixture.
				if all < 100 {
					t.Fatalf("only %d samples in %v of the fixture's CPU time at %d Hz", all, accuracyCPU, accuracyHz)
				}
				if copies && st.Copies == 0 && st.KernelWhole == 0 {
					t.Fatalf("no sample carried a stack copy: the collector did not mark pid %d", pid)
				}
				if copies && !slices.Equal(col.CopyPids(), []uint32{pid}) {
					t.Errorf("CopyPids() = %v, want [%d]", col.CopyPids(), pid)
				}
				if tables && st.KernelWhole == 0 {
					t.Errorf("no sample was walked whole in the kernel (%d tables loaded, %d refused: %v)", st.KernelTables, st.KernelErrors, st.KernelErr)
				}
				if share < 0.995 {
					t.Errorf("%.2f%% of the samples show compare → libc → run → main, want ≥ 99.5%%; others: %v", 100*share, bad)
				}

				perfShare, perfAll := perfReachMain(t, pid, path)
				t.Logf("perf --call-graph dwarf: %d samples, %.2f%% reach main", perfAll, 100*perfShare)
				// perf records the same process in a second window, so the two
				// shares are different samples of one rate: one sample of
				// difference (both near 100%) is noise, not a worse unwinder.
				if reach+1/float64(all) < perfShare {
					t.Errorf("sprof: %.2f%% of the samples reach main, perf: %.2f%%", 100*reach, 100*perfShare)
				}
			})
		}
	}
}

// recordAccuracy records src while process pid runs accuracyCPU of CPU
// time, and returns the profile and the samples lost. With warm, it first
// drains until the collector has loaded the fixture's tables into the
// kernel and none is being built, and leaves that interval out.
func recordAccuracy(t *testing.T, col *collector.Collector, src *bpfsource.Source, pid int, warm bool) (*stacks.Profile, uint64) {
	t.Helper()
	// ran says, once pid has run accuracyCPU from now on, nil, or why it
	// could not.
	ran := func() <-chan error {
		done := make(chan error, 1)
		go func() { done <- proctime.Wait(pid, accuracyCPU) }()
		return done
	}
	if !warm {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		end := ran()
		var waitErr error
		go func() {
			waitErr = <-end
			cancel()
		}()
		prof, stats, err := col.Run(ctx, src, nil)
		if err != nil {
			t.Fatal(err)
		}
		if waitErr != nil {
			t.Fatal(waitErr)
		}
		return prof, stats.Lost
	}
	defer col.Close()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(30 * time.Second); ; <-tick.C {
		if err := col.Drain(src); err != nil {
			t.Fatal(err)
		}
		if st := col.UnwindStats(); st.KernelTables > 0 && st.Building == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the fixture's tables were not loaded in 30 s: %+v", col.UnwindStats())
		}
	}
	col.CutInterval(src)
	end := ran()
	for done := false; !done; {
		select {
		case err := <-end:
			if err != nil {
				t.Fatal(err)
			}
			done = true
		case <-tick.C:
		}
		if err := col.Drain(src); err != nil {
			t.Fatal(err)
		}
	}
	iv := col.CutInterval(src)
	return iv.Resolve(context.Background()), iv.Stats.Lost
}

// perfReachMain records pid with perf record --call-graph dwarf and
// returns the share of its samples whose call chain holds the fixture's
// main, and the sample count.
func perfReachMain(t *testing.T, pid uint32, fixture string) (float64, int) {
	perf := testenv.RequireTool(t, "perf")
	data := filepath.Join(t.TempDir(), "perf.data")
	rec := exec.Command(perf, "record", "-q", "--call-graph", "dwarf", "-F", "999", "-p", strconv.FormatUint(uint64(pid), 10), "-o", data, "--", "sleep", accuracyCPU.String())
	if out, err := rec.CombinedOutput(); err != nil {
		t.Fatalf("perf record: %v\n%s", err, out)
	}
	out, err := exec.Command(perf, "script", "-i", data).Output()
	if err != nil {
		t.Fatalf("perf script: %v", err)
	}
	var all, good int
	inSample, reached := false, false
	end := func() {
		if inSample {
			all++
			if reached {
				good++
			}
		}
		inSample, reached = false, false
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			end()
		case line[0] != ' ' && line[0] != '\t':
			end()
			inSample = true
		case strings.Contains(line, " main+") && strings.HasSuffix(line, "("+fixture+")"):
			reached = true
		}
	}
	end()
	if all == 0 {
		t.Fatalf("perf recorded no samples of pid %d", pid)
	}
	return float64(good) / float64(all), all
}
