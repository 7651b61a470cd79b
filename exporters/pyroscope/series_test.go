package pyroscope

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sprof/sprof/exporters/pyroscope/pyroscopetest"
	"github.com/sprof/sprof/stacks"
)

const (
	containerA = "4f797c539e6c745de61a93ca3ff892358ecbcaccd8414d5db545c38428142970"
	containerB = "9ec39b91f3d70e1beff50a308f77067065ea6be0d91a3378375056cd4422cf3d"
)

// fakeProc makes a procfs with the comm files of pids 20 (db) and 50.
func fakeProc(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for pid, comm := range map[int]string{20: "db\n", 50: "ignored\n"} {
		dir := filepath.Join(root, fmt.Sprint(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "comm"), []byte(comm), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestServices: a process is named after its main thread, from /proc
// when only other threads were sampled, and after a thread only when it
// is gone from /proc; per-CPU kernel threads share one name.
func TestServices(t *testing.T) {
	samples := []*stacks.Sample{
		{Pid: 10, Tid: 11, Comm: "worker"}, {Pid: 10, Tid: 10, Comm: "web"},
		{Pid: 20, Tid: 21, Comm: "db-io"},
		{Pid: 30, Tid: 31, Comm: "gone-thread"},
		{Pid: 40, Tid: 40, Comm: "kworker/3:1"}, {Pid: 41, Tid: 41, Comm: "kworker/u8:0"},
		{Pid: 50, Tid: 50, Comm: "bad\xff"}, {Pid: 60, Tid: 60, Comm: " "},
	}
	service := Services("", samples, fakeProc(t))
	want := map[uint32]string{10: "web", 20: "db", 30: "gone-thread", 40: "kworker", 41: "kworker", 50: "bad_", 60: "unknown"}
	for _, s := range samples {
		if got := service(s); got != want[s.Pid] {
			t.Errorf("pid %d/%d named %q, want %q", s.Pid, s.Tid, got, want[s.Pid])
		}
	}
	if got := Services("", samples, "")(samples[2]); got != "db-io" {
		t.Errorf("without /proc, pid 20 is %q; want its thread's name", got)
	}
	if got := Services("host", samples, "")(samples[0]); got != "host" {
		t.Errorf("with a service name: %q", got)
	}
}

// TestSplit files samples by service and container, in order.
func TestSplit(t *testing.T) {
	p := &stacks.Profile{Start: time.Unix(1, 0), Period: time.Second / 19, Lost: 2, Samples: []*stacks.Sample{
		{Pid: 10, Tid: 10, Comm: "web", Container: containerB, Count: 1},
		{Pid: 11, Tid: 11, Comm: "web", Container: containerA, Count: 2},
		{Pid: 12, Tid: 12, Comm: "web", Count: 4},
		{Pid: 13, Tid: 13, Comm: "db", Container: containerA, Count: 8},
		{Pid: 14, Tid: 14, Comm: "web", Container: containerA, Count: 16},
	}}
	var got []string
	for _, s := range Split(p, Services("", p.Samples, "")) {
		var n int64
		for _, smp := range s.Profile.Samples {
			n += smp.Count
		}
		if !s.Profile.Start.Equal(p.Start) || s.Profile.Period != p.Period || s.Profile.Lost != 2 {
			t.Errorf("series %s/%s: %+v", s.Service, s.Container, s.Profile)
		}
		got = append(got, fmt.Sprintf("%s %.4s %d", s.Service, s.Container, n))
	}
	want := []string{"db 4f79 8", "web  4", "web 4f79 18", "web 9ec3 1"}
	if !slices.Equal(got, want) {
		t.Errorf("series %q; want %q", got, want)
	}
	if s := Split(&stacks.Profile{}, Services("x", nil, "")); len(s) != 0 {
		t.Errorf("an empty profile made %d series", len(s))
	}
}

// TestPushContainers pushes a container's samples under a container_id
// series label, apart from the same program's samples outside it.
func TestPushContainers(t *testing.T) {
	fake := pyroscopetest.NewServer()
	c, err := New(Config{URL: fake.Start(t), Host: "node-1"})
	if err != nil {
		t.Fatal(err)
	}
	p := testProfile(time.Now().Add(-time.Minute))
	for _, s := range p.Samples {
		if s.Pid == 20 {
			s.Container = containerA
		}
	}
	if err := c.Push(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, fp := range fake.Profiles() {
		got = append(got, labelString(fp.Labels))
		if n := totalCount(check(t, fp.Profile)); n == 0 {
			t.Errorf("an empty profile under %s", labelString(fp.Labels))
		}
	}
	want := []string{
		"__name__=process_cpu,container_id=" + containerA + ",host=node-1,service_name=web",
		"__name__=process_cpu,host=node-1,service_name=db",
		"__name__=process_cpu,host=node-1,service_name=web",
	}
	slices.Sort(got) // the requests go concurrently
	if !slices.Equal(got, want) {
		t.Errorf("series\n%q\nwant\n%q", got, want)
	}
}

// BenchmarkSplit files a busy interval's samples — 5,000 stacks of 200
// processes, half of them seen only in worker threads, whose names come
// from /proc — under their series.
func BenchmarkSplit(b *testing.B) {
	const samples, procs = 5000, 200
	var ss []*stacks.Sample
	for i := range samples {
		pid := uint32(1_000_000 + i%procs) // not running here: /proc is read and misses
		tid := pid
		if pid%2 == 1 {
			tid++
		}
		ss = append(ss, &stacks.Sample{Pid: pid, Tid: tid, Comm: "worker", Count: 1})
	}
	p := &stacks.Profile{Samples: ss}
	b.ReportAllocs()
	for b.Loop() {
		Split(p, Services("", p.Samples, "/proc"))
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*samples), "ns/sample")
}
