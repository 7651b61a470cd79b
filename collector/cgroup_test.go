package collector

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sprof/sprof/collector/container/containertest"
	"github.com/sprof/sprof/stacks"
)

const (
	containerA = "4f797c539e6c745de61a93ca3ff892358ecbcaccd8414d5db545c38428142970"
	containerB = "9ec39b91f3d70e1beff50a308f77067065ea6be0d91a3378375056cd4422cf3d"
)

// setCgroup writes pid's /proc/PID/cgroup.
func (f *fakeProc) setCgroup(pid uint32, cgroup string) {
	dir := filepath.Join(f.root, strconv.FormatUint(uint64(pid), 10))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(cgroup), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// containersOf returns the container of every pid with samples in p.
func containersOf(t *testing.T, p *stacks.Profile) map[uint32]string {
	t.Helper()
	out := map[uint32]string{}
	for _, s := range p.Samples {
		if c, ok := out[s.Pid]; ok && c != s.Container {
			t.Errorf("pid %d has samples in containers %q and %q", s.Pid, c, s.Container)
		}
		out[s.Pid] = s.Container
	}
	return out
}

// TestContainers follows the container of processes found in /proc, forked,
// exec'd and gone, through the profile and a Sink: /proc/PID/cgroup is
// read once per process, at its first sighting, never for a child that
// forked without exec'ing (it is in its parent's cgroup), and a process
// whose cgroup file is gone keeps what it inherited.
func TestContainers(t *testing.T) {
	bin := realPath(t, "/bin/true")
	proc := newFakeProc(t)
	proc.set(100, 111, 0x1000, 0x2000, bin)
	proc.setCgroup(100, "0::/system.slice/docker-"+containerA+".scope\n")
	proc.set(200, 222, 0x1000, 0x2000, bin)
	proc.setCgroup(200, "0::/system.slice/ssh.service\n")
	// 101 forks from 100 and says nothing of its cgroup; 102 forks from
	// 100, then execs into another container's cgroup; 103 forks from
	// 100 and execs but is gone by the drain.
	proc.setCgroup(101, "0::/system.slice/docker-"+containerB+".scope\n")
	proc.setCgroup(102, "0::/kubepods/burstable/pod1f0b6b3e/"+containerB+"\n")

	sink := &logSink{}
	c, err := New(Options{Frequency: 99, ProcRoot: proc.root, NoSideband: true, Sink: sink})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.events = []event{
		{time: 10, kind: eventFork, pid: 101, tid: 101, ppid: 100},
		{time: 10, kind: eventFork, pid: 102, tid: 102, ppid: 100},
		{time: 10, kind: eventFork, pid: 103, tid: 103, ppid: 100},
		{time: 20, kind: eventExec, pid: 102, tid: 102},
		mmapEvent(21, 102, 0x1000, 0x2000, 0, bin, nil),
		{time: 20, kind: eventExec, pid: 103, tid: 103},
		mmapEvent(21, 103, 0x1000, 0x2000, 0, bin, nil),
	}
	src := &fakeSource{}
	for _, pid := range []uint32{100, 101, 102, 103, 200} {
		src.add(pid, 30, 0x1100)
		src.add(pid, 40, 0x1200)
	}
	if err := c.Drain(src); err != nil {
		t.Fatal(err)
	}
	want := map[uint32]string{100: containerA, 101: containerA, 102: containerB, 103: containerA, 200: ""}
	got := containersOf(t, c.Profile())
	for pid, id := range want {
		if got[pid] != id {
			t.Errorf("pid %d in container %q; want %q", pid, got[pid], id)
		}
	}
	var told []string
	for _, l := range sink.log {
		if strings.Contains(l, " process ") {
			told = append(told, strings.Join(strings.Fields(l)[2:5], " "))
		}
	}
	wantTold := []string{`100 p100 "` + containerA + `"`, `101 p101 "` + containerA + `"`, `102 p102 "` + containerB + `"`,
		`103 p103 "` + containerA + `"`, `200 p200 ""`}
	if strings.Join(told, "\n") != strings.Join(wantTold, "\n") {
		t.Errorf("the sink was told of\n%s\nwant\n%s", strings.Join(told, "\n"), strings.Join(wantTold, "\n"))
	}
}

// TestContainerOfRunningProcess puts a real process in a cgroup named as
// Docker names a container's, so that the kernel writes the cgroup line,
// and expects the collector to find the container when it first reads the
// process from /proc.
func TestContainerOfRunningProcess(t *testing.T) {
	cg := containertest.New(t)
	sleep := realPath(t, "/bin/sleep")
	cmd := exec.Command(sleep, "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	cg.Add(t, cmd.Process.Pid)
	tb := newTable("/proc", nil, false, 1)
	img, err := tb.load(uint32(cmd.Process.Pid), 0)
	if err != nil {
		t.Fatal(err)
	}
	if img.container != cg.ID || !img.containerKnown {
		t.Errorf("container %q (known %v); want %q", img.container, img.containerKnown, cg.ID)
	}
}
