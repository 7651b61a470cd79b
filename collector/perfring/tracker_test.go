package perfring

import (
	"encoding/hex"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sprof/sprof/internal/testenv"
	"github.com/sprof/sprof/symbolize/buildid"
)

func clock(t testing.TB, id int32) uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(id, &ts); err != nil {
		t.Fatal(err)
	}
	return uint64(ts.Nano())
}

// TestTrackerSeesProcessLife runs /bin/true and expects its fork, exec,
// executable mapping with the build ID readelf would show, and exit, all
// stamped with CLOCK_MONOTONIC times inside the run.
func TestTrackerSeesProcessLife(t *testing.T) {
	testenv.RequireRoot(t)
	tr, err := Open(0)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	seesProcessLife(t, tr, true)
}

// TestTrackerWithoutBuildIDs: the events as a kernel before 5.12 takes
// them, which refuses the build_id bit: the same records, MMAP2 without
// the build ID. (The kernel matrix's 5.10 VMs run Open's own fallback.)
func TestTrackerWithoutBuildIDs(t *testing.T) {
	testenv.RequireRoot(t)
	tr, err := openTracker(0, false)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	seesProcessLife(t, tr, false)
}

// TestTrackerBesideBuildIDs: a tracker without build IDs, with another
// that has them opened after it (sprof on a kernel before 5.12 cannot
// meet one, but a test of it can), still reads each mapping's device and
// inode. Linux 6.18 leaves the build-ID bit that it set in the record it
// builds once for both in the first one's records too (see Parse).
func TestTrackerBesideBuildIDs(t *testing.T) {
	testenv.RequireRoot(t)
	without, err := openTracker(0, false)
	if err != nil {
		t.Fatal(err)
	}
	defer without.Close()
	with, err := openTracker(0, true)
	if err != nil {
		t.Fatal(err)
	}
	defer with.Close()
	if !with.buildIDs {
		t.Skip("the kernel gives no build IDs (before Linux 5.12)")
	}
	seesProcessLife(t, without, false)
}

// seesProcessLife runs /bin/true and expects tr to report its fork, exec,
// the MMAP2 of its file (with its build ID if buildIDs) and its exit.
func seesProcessLife(t *testing.T, tr *Tracker, buildIDs bool) {
	t.Helper()
	truePath, err := filepath.EvalSymlinks("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	wantID, err := buildid.File(truePath)
	if err != nil {
		t.Fatal(err)
	}
	before := clock(t, unix.CLOCK_MONOTONIC)
	cmd := exec.Command(truePath)
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	after := clock(t, unix.CLOCK_MONOTONIC)
	pid := uint32(cmd.Process.Pid)

	var fork, execd, mapped, exited bool
	if _, err := tr.Read(func(r *Record) {
		if r.Pid != pid {
			return
		}
		if r.Time < before || r.Time > after {
			t.Errorf("%v at %d, outside the run [%d, %d]", r.Type, r.Time, before, after)
		}
		switch {
		case r.Type == RecordFork && r.Tid == pid:
			fork = true
		case r.IsExec():
			execd = string(r.Comm) == "true"
		case r.Type == RecordMmap2 && string(r.Filename) == truePath:
			want := wantID
			if !buildIDs {
				want = ""
			}
			if got := hex.EncodeToString(r.BuildID); got != want {
				t.Errorf("MMAP2 of %s: build ID %q, want %q", truePath, got, want)
			}
			mapped = true
		case r.Type == RecordExit && r.Tid == pid:
			exited = true
		}
	}); err != nil {
		t.Fatal(err)
	}
	if !fork || !execd || !mapped || !exited {
		t.Fatalf("records for pid %d: fork %v, exec %v, mmap2 of %s %v, exit %v", pid, fork, execd, truePath, mapped, exited)
	}
	if tr.Lost() != 0 {
		t.Errorf("lost %d records on an idle machine", tr.Lost())
	}
}

// BenchmarkTrackerExec measures the side band of real process starts: the
// records each fork+exec+exit of /bin/true produces and the cost of
// draining them.
func BenchmarkTrackerExec(b *testing.B) {
	testenv.RequireRoot(b)
	tr, err := Open(0)
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close()
	// Drain time is the thread's CPU time: on a loaded host wall time
	// would mostly measure the neighbours.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var records, drainNs int
	for range b.N {
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
		start := clock(b, unix.CLOCK_THREAD_CPUTIME_ID)
		n, _ := tr.Read(func(*Record) {})
		drainNs += int(clock(b, unix.CLOCK_THREAD_CPUTIME_ID) - start)
		records += n
	}
	b.ReportMetric(float64(records)/float64(b.N), "records/exec")
	b.ReportMetric(float64(drainNs)/float64(max(records, 1)), "ns/record")
}

// TestTrackerCountsLost overflows a one-page ring with process starts and
// expects the kernel's PERF_RECORD_LOST to be counted.
func TestTrackerCountsLost(t *testing.T) {
	testenv.RequireRoot(t)
	tr, err := Open(1)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	// Each start writes about 8 records of ~100 bytes: 40 overflow 4 KiB
	// on whichever CPU they run.
	for range 40 {
		if err := exec.Command("/bin/true").Run(); err != nil {
			t.Fatal(err)
		}
	}
	tr.Read(func(*Record) {})
	// The kernel reports the loss with the next record it can write into
	// the ring that lost: start processes, one at a time, until one runs
	// on that ring's CPU.
	for range 20 {
		if err := exec.Command("/bin/true").Run(); err != nil {
			t.Fatal(err)
		}
		tr.Read(func(*Record) {})
		if tr.Lost() > 0 {
			break
		}
	}
	if tr.Lost() == 0 {
		t.Fatal("no records lost after 40 process starts into a one-page ring")
	}
	t.Logf("%d records lost", tr.Lost())
}
