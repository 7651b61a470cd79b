package agent

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/sprof/sprof/internal/proctime"
	"github.com/sprof/sprof/internal/pychain"
	"github.com/sprof/sprof/internal/testenv"
	"github.com/sprof/sprof/pipeline"
	"github.com/sprof/sprof/symbolize"
)

// TestBPFAgentPython runs the real agent as `sprof agent` does (GSYM
// symbolizer, Python frames on) while the chain fixture runs under
// Debian's python3.11 and pyenv's 3.10 where installed (the two ways
// CPython keeps frames), and wants >= 95% of each fixture's samples in the
// profiles it writes, found by their pid label, to show the fixture's
// chain exactly with file:line (pychain.Fixture.ChainOK), as
// TestRecordPython wants of record. The agent samples the fixtures only:
// a host-wide one on a busy host spends minutes naming everything else.
func TestBPFAgentPython(t *testing.T) {
	testenv.RequireRoot(t)
	fx := pychain.Load(t, "..")
	pythons := []string{testenv.RequireTool(t, pychain.Debian)}
	if python := pychain.Pyenv("3.10"); python != "" {
		pythons = append(pythons, python)
	} else {
		t.Log("no pyenv build of Python 3.10: its frames not tested (pyenv install 3.10)")
	}
	fixtures := map[int64]string{} // pid: interpreter
	var pids []uint32
	for _, python := range pythons {
		cmd := pychain.Start(t, python, fx.Path)
		fixtures[int64(cmd.Process.Pid)] = filepath.Base(python)
		pids = append(pids, uint32(cmd.Process.Pid))
	}
	sym, err := symbolize.NewGSYM(symbolize.GSYMOptions{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	_, a, dir, stop := startBPFAgent(t, pipeline.Config{Frequency: 499, User: true, StackCopy: pipeline.DefaultStackCopy, Python: true,
		Pids: pids, Symbolizer: sym})
	// The first samples of each interpreter wait, held back, for the
	// unwind tables of python and libpython (built at a low priority,
	// seconds on a loaded host), and are cut short, marked truncated,
	// when they waited 2 s: the warm-up, not the steady state this test
	// is about. So the samples counted are those of the intervals that
	// began after a cut at which no table was being built and no sample
	// was held (the metrics' copy of the unwinder's statistics, set at
	// each cut). warmFrom is the first stamp of those intervals.
	var warmFrom string
	warm := func() bool {
		if warmFrom != "" {
			return true
		}
		st := a.metrics.unwind.Load()
		if st == nil || st.Building > 0 || st.Tables == 0 || st.Held > st.Released+st.FlushedFull+st.FlushedAge+st.FlushedEnd {
			return false
		}
		// The intervals counted start after now, which is after the
		// warm cut (the names' stamps are their intervals' starts).
		warmFrom = time.Now().UTC().Format(stampLayout)
		return true
	}
	// samples returns the samples of each fixture in the profiles of the
	// intervals that began once the unwinder was warm, none before.
	samples := func() map[int64][]*profile.Sample {
		out := map[int64][]*profile.Sample{}
		if !warm() {
			return out
		}
		files, _ := filepath.Glob(filepath.Join(dir, "*.pb.gz"))
		for _, f := range files {
			if stamp, _ := stampOf(filepath.Base(f)); stamp < warmFrom {
				continue
			}
			for _, s := range readPprof(t, f).Sample {
				if pid := s.NumLabel["pid"]; len(pid) == 1 && fixtures[pid[0]] != "" {
					out[pid[0]] = append(out[pid[0]], s)
				}
			}
		}
		return out
	}
	// At 499 Hz, 200 samples are 0.4 s of a fixture's CPU time; the
	// profiles come an interval later, once named.
	const enough = 200
	proctime.Until(t, int(pids[len(pids)-1]), 30*time.Second, fmt.Sprintf("%d samples of each fixture in the agent's profiles once the unwinder is warm", enough), func() bool {
		got := samples()
		for pid := range fixtures {
			if sampleCount(got[pid]) < enough {
				return false
			}
		}
		return true
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if st := a.metrics.unwind.Load(); st != nil {
		t.Logf("unwinder: %d tables built in %v; samples held %d, released %d, cut short after 2 s %d; counted from %s",
			st.Tables, st.BuildTime, st.Held, st.Released, st.FlushedAge, warmFrom)
	}
	for pid, ss := range samples() {
		var good int64
		var bad []string
		for _, s := range ss {
			if ok, _ := fx.ChainOK(pychain.RootFirst(s)); ok {
				good += s.Value[0]
			} else if len(bad) < 5 {
				bad = append(bad, pychain.Brief(pychain.RootFirst(s)))
			}
		}
		n := sampleCount(ss)
		t.Logf("%s: %d of %d samples show the chain; others like %q", fixtures[pid], good, n, bad)
		if good*100 < n*95 {
			t.Errorf("%s: %d of %d samples in the agent's profiles show the chain, want >= 95%%", fixtures[pid], good, n)
		}
	}
}

// sampleCount is the number of samples ss count.
func sampleCount(ss []*profile.Sample) int64 {
	var n int64
	for _, s := range ss {
		n += s.Value[0]
	}
	return n
}
