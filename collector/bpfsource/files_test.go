package bpfsource_test

import (
	"context"
	"io"
	"os"
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
	"github.com/sprof/sprof/stacks"
	"github.com/sprof/sprof/symbolize"
	"github.com/sprof/sprof/symbolize/buildid"
)

// TestDeletedAndContainerBinaries records programs whose files the host
// cannot open by their path, and expects their samples attributed to the
// file by build ID and symbolized all the same: one deleted after it
// started and before sprof did (found in /proc), one deleted after its
// exec while sprof records (found through the side band), and one that
// exists only in a private mount namespace, as a container's files do,
// while the same path on the host holds another program.
func TestDeletedAndContainerBinaries(t *testing.T) {
	testenv.RequireRoot(t)
	unshare := testenv.RequireTool(t, "unshare")
	spin, err := filepath.Abs("../../testdata/e2e/spin")
	if err != nil {
		t.Fatal(err)
	}
	wantID, err := buildid.File(spin)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	early, late := filepath.Join(dir, "early"), filepath.Join(dir, "late")
	nsDir := filepath.Join(dir, "ns")
	inNS := filepath.Join(nsDir, "spin")
	copyFile(t, spin, early)
	copyFile(t, spin, late)
	if err := os.Mkdir(nsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	copyFile(t, realPath(t, "/bin/true"), inNS) // what the host sees at that path

	start := func(cmd *exec.Cmd) io.WriteCloser {
		t.Helper()
		release, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return release
	}
	earlyCmd := exec.Command(early, "600")
	start(earlyCmd)
	if err := os.Remove(early); err != nil {
		t.Fatal(err)
	}
	// The other two wait for a line before they exec the fixture, so that
	// their pids are in the filter first.
	lateCmd := exec.Command("sh", "-c", `read x; exec "$0" 600`, late)
	releaseLate := start(lateCmd)
	nsCmd := exec.Command(unshare, "--mount", "--propagation", "private", "sh", "-c",
		`read x; mount -t tmpfs sprof-test "$0" && cp "$1" "$0/spin" && exec "$0/spin" 600`, nsDir, spin)
	releaseNS := start(nsCmd)
	want := map[uint32]string{
		uint32(earlyCmd.Process.Pid): early,
		uint32(lateCmd.Process.Pid):  late,
		uint32(nsCmd.Process.Pid):    inNS,
	}
	var pids []uint32
	for pid := range want {
		pids = append(pids, pid)
	}

	const hz = 499
	c, err := collector.New(collector.Options{Frequency: hz, Pids: pids, Symbolizer: symbolize.NewELF(symbolize.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	s, err := bpf.Open(bpf.Config{Frequency: hz, Pids: pids, User: true, Kernel: true})
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	defer s.Close()
	for _, w := range []io.WriteCloser{releaseLate, releaseNS} {
		if _, err := w.Write([]byte("go\n")); err != nil {
			t.Fatal(err)
		}
	}
	// Until each process has run 300 ms of CPU time (about 150 samples),
	// however long a loaded host takes to give them that.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() {
		defer cancel()
		for pid := range want {
			if err := proctime.Wait(int(pid), 300*time.Millisecond); err != nil {
				ran <- err
				return
			}
		}
		ran <- nil
	}()
	go func() {
		waitExec(t, lateCmd.Process.Pid, late)
		os.Remove(late)
	}()
	prof, _, err := c.Run(ctx, bpfsource.New(s), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(late); err == nil {
		t.Fatalf("%s was not deleted while sprof recorded", late)
	}

	inSpin, inC := map[uint32]int64{}, map[uint32]int64{}
	for _, smp := range prof.Samples {
		for _, l := range smp.Stack {
			if l.Mapping.Kind != stacks.User || l.Mapping.BuildID != wantID {
				continue
			}
			if l.Mapping.File != want[smp.Pid] {
				t.Errorf("pid %d: the fixture's build ID under %q, want %q", smp.Pid, l.Mapping.File, want[smp.Pid])
			}
			inSpin[smp.Pid] += smp.Count
			if slices.ContainsFunc(l.Frames, func(f stacks.Frame) bool { return f.Function == "c" }) {
				inC[smp.Pid] += smp.Count
			}
			break
		}
	}
	for pid, file := range want {
		t.Logf("pid %d (%s): %d samples in the fixture's code, %d of them in c", pid, file, inSpin[pid], inC[pid])
		if inSpin[pid] < 10 || inC[pid]*10 < inSpin[pid]*9 {
			t.Errorf("pid %d (%s): %d samples attributed to the fixture, %d symbolized to c; want 10 or more, 90%% in c",
				pid, file, inSpin[pid], inC[pid])
		}
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

func realPath(t *testing.T, p string) string {
	t.Helper()
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// waitExec waits for process pid to run path, however long a loaded host
// takes to run it there, or to exit.
func waitExec(t *testing.T, pid int, path string) {
	for ; ; time.Sleep(5 * time.Millisecond) {
		exe, _ := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "exe"))
		if strings.HasPrefix(exe, path) {
			return
		}
		if _, err := proctime.CPU(pid); err != nil {
			t.Errorf("pid %d did not exec %s: %v (%s)", pid, path, err, exe)
			return
		}
	}
}
