package bpf

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sprof/sprof/internal/testenv"
)

// cgroup2Mount finds where the cgroup v2 hierarchy is mounted (also on
// hybrid hosts, where it sits at /sys/fs/cgroup/unified).
func cgroup2Mount(t *testing.T) string {
	t.Helper()
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 2 && fields[2] == "cgroup2" {
			return fields[1]
		}
	}
	testenv.Unavailable(t, "no cgroup v2 hierarchy mounted")
	return ""
}

// The cgroup filter passes a cgroup and its descendants and nothing else.
func TestCgroupFilter(t *testing.T) {
	requireFixture(t)
	parent := filepath.Join(cgroup2Mount(t), fmt.Sprintf("sprof-bpf-test-%d", os.Getpid()))
	child := filepath.Join(parent, "child")
	if err := os.MkdirAll(child, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // runs after the fixtures are killed and reaped
		os.Remove(child)
		os.Remove(parent)
	})
	inside, _ := startFixture(t, "chain")
	outside, _ := startFixture(t, "chain")
	if err := os.WriteFile(filepath.Join(child, "cgroup.procs"), []byte(strconv.Itoa(inside.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(parent)
	if err != nil {
		t.Fatal(err)
	}
	id := fi.Sys().(*syscall.Stat_t).Ino // a cgroup v2 id is its directory's inode number
	onEveryPath(t, func(t *testing.T, features *Features) {
		s := openSampler(t, Config{Frequency: 499, CgroupID: id, User: true, features: features})
		byPid := map[uint32]int{}
		collect(t, s, time.Second, func(x *Sample) bool { byPid[x.Pid]++; return false })
		if byPid[uint32(inside.Process.Pid)] == 0 || len(byPid) != 1 {
			t.Fatalf("samples by pid %v; want only pid %d (in a child of cgroup %d), not %d",
				byPid, inside.Process.Pid, id, outside.Process.Pid)
		}
	})
	// The off-CPU program's filter walks the cgroup tree of the thread
	// leaving the CPU: two sleepers, one in the child (where the spinner
	// above still runs).
	t.Run("off-CPU", func(t *testing.T) {
		in, startIn, resultIn := offCPUFixture(t, "nanosleep", "20", "2000")
		out, startOut, resultOut := offCPUFixture(t, "nanosleep", "20", "2000")
		if err := os.WriteFile(filepath.Join(child, "cgroup.procs"), []byte(strconv.Itoa(in)), 0); err != nil {
			t.Fatal(err)
		}
		s := openSampler(t, Config{CgroupID: id, User: true, Kernel: true, OffCPU: true, OffCPUExitBudget: -1})
		startIn()
		startOut()
		resultIn()
		resultOut()
		byPid := map[int]int{}
		if _, err := s.Read(func(x *Sample) { byPid[int(x.Pid)]++ }); err != nil {
			t.Fatal(err)
		}
		st, err := s.Stats()
		if err != nil {
			t.Fatal(err)
		}
		// Each of the 20 sleeps is recorded or counted lost (its record
		// found the ring full, or on a loaded host another thread took
		// its place in the table of switch-out times): once, on a make
		// test's load, 19 arrived and the count was not kept.
		if byPid[in]+int(st.OffCPU.Lost) < 20 || byPid[in] == 0 || byPid[out] != 0 || len(byPid) > 2 {
			t.Fatalf("off-CPU records by pid %v, %+v; want 20 or more of pid %d (in a child of cgroup %d) with those lost, maybe some of %d (in it too), none of %d",
				byPid, st.OffCPU, in, id, inside.Process.Pid, out)
		}
	})
}

// Without IncludeIdle no idle sample arrives, and sprof never samples
// itself. The controls: a copy of this test binary spinning in a child
// process is sampled, and a sampler with IncludeIdle sees the idle task
// when every CPU idled meanwhile (/proc/stat). Not when only some did: on
// this VM an idle virtual CPU's timer may not fire (see
// TestEveryOnlineCPUAtFrequency).
func TestIdleAndSelfExcluded(t *testing.T) {
	if os.Getenv("SPROF_BPF_SPIN_CHILD") == "1" {
		for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		}
		return
	}
	requireBPF(t)
	s := openSampler(t, Config{Frequency: 999, User: true, Kernel: true})
	idle := openSampler(t, Config{Frequency: 999, User: true, Kernel: true, IncludeIdle: true})
	var bad []uint32
	exclude := func(x *Sample) bool {
		if x.Pid == 0 || x.Pid == uint32(os.Getpid()) {
			bad = append(bad, x.Pid)
		}
		return false
	}

	// While this test sleeps, the host may idle.
	idleBefore := idleTime(t)
	collect(t, s, 500*time.Millisecond, exclude)
	idleSamples := len(collect(t, idle, 0, ofPid(0)))
	idled := idleTime(t)
	allIdled := len(idled) > 0
	for cpu, d := range idled {
		idled[cpu] = d - idleBefore[cpu]
		allIdled = allIdled && idled[cpu] >= 100*time.Millisecond
	}

	// While it and a copy of it spin, it would be sampled.
	child := exec.Command(os.Args[0], "-test.run=^TestIdleAndSelfExcluded$")
	child.Env = append(os.Environ(), "SPROF_BPF_SPIN_CHILD=1")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { child.Process.Kill(); child.Wait() })
	var stop atomic.Bool
	go func() {
		for !stop.Load() {
		}
	}()
	childSamples := len(collect(t, s, time.Second, func(x *Sample) bool {
		exclude(x)
		return x.Pid == uint32(child.Process.Pid)
	}))
	stop.Store(true)

	t.Logf("%d samples of the spinning child; with IncludeIdle %d of pid 0 while the CPUs idled %v", childSamples, idleSamples, idled)
	if len(bad) > 0 {
		t.Fatalf("%d samples of pid 0 or of sprof itself (pid %d), first: pid %d", len(bad), os.Getpid(), bad[0])
	}
	if childSamples == 0 {
		t.Fatalf("no sample of pid %d, a copy of this test spinning: the self filter's absence of samples proves nothing", child.Process.Pid)
	}
	if allIdled && idleSamples == 0 {
		t.Fatalf("every CPU idled 100 ms or more (%v) but IncludeIdle gave no sample of pid 0", idled)
	}
}

// idleTime is each CPU's idle time so far, from the cpuN lines of
// /proc/stat (field 4, in USER_HZ ticks of 10 ms).
func idleTime(t *testing.T) map[int]time.Duration {
	t.Helper()
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	idle := map[int]time.Duration{}
	for _, line := range strings.Split(string(b), "\n") {
		var cpu int
		var user, nice, system, ticks int64
		if len(line) < 4 || line[3] < '0' || line[3] > '9' { // not a cpuN line
			continue
		}
		if _, err := fmt.Sscanf(line, "cpu%d %d %d %d %d", &cpu, &user, &nice, &system, &ticks); err == nil {
			idle[cpu] = time.Duration(ticks) * 10 * time.Millisecond
		}
	}
	return idle
}

// Without root or CAP_BPF+CAP_PERFMON, Open says so in one line. As root,
// the test reruns itself as nobody with no capabilities.
func TestOpenWithoutPrivileges(t *testing.T) {
	if os.Geteuid() != 0 {
		_, err := Open(Config{Frequency: 99, User: true})
		if !errors.Is(err, ErrPermission) || strings.Contains(err.Error(), "\n") {
			t.Fatalf("Open as uid %d: %v; want a one-line ErrPermission", os.Geteuid(), err)
		}
		t.Log(err)
		return
	}
	setpriv := testenv.RequireTool(t, "setpriv")
	bin := testenv.UnprivilegedCopy(t)
	out, err := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
		bin, "-test.run=^TestOpenWithoutPrivileges$", "-test.v").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "missing privileges: sprof needs root") {
		t.Fatalf("unprivileged rerun: %v\n%s", err, out)
	}
}

// TestOpenWithBPFAndPerfmonOnly reruns itself as root with every capability
// but CAP_BPF and CAP_PERFMON dropped: sampling must work, and Stats must
// say why it has no run-time figures (only CAP_SYS_ADMIN may enable them).
func TestOpenWithBPFAndPerfmonOnly(t *testing.T) {
	if os.Getenv("SPROF_BPF_CAPS_CHILD") == "1" {
		s, err := Open(Config{Frequency: 99, User: true, Kernel: true, RunTimeStats: true})
		if err != nil {
			t.Fatalf("Open with CAP_BPF and CAP_PERFMON: %v", err)
		}
		defer s.Close()
		if _, err := s.Stats(); err == nil || !strings.Contains(err.Error(), "CAP_SYS_ADMIN") {
			t.Fatalf("Stats() error = %v; want one naming CAP_SYS_ADMIN", err)
		}
		return
	}
	testenv.RequireRoot(t)
	setpriv := testenv.RequireTool(t, "setpriv")
	cmd := exec.Command(setpriv, "--bounding-set=-all,+bpf,+perfmon", "--inh-caps=-all",
		os.Args[0], "-test.run=^TestOpenWithBPFAndPerfmonOnly$", "-test.v")
	cmd.Env = append(os.Environ(), "SPROF_BPF_CAPS_CHILD=1")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "--- PASS") {
		t.Fatalf("rerun with CAP_BPF and CAP_PERFMON only: %v\n%s", err, out)
	}
}
