package agent

import (
	"slices"
	"testing"

	"github.com/sprof/sprof/stacks"
)

// TestServiceNames: a process is named after its main thread, from /proc
// when only other threads were sampled, and after a thread only when it
// is gone from /proc; per-CPU kernel threads share one name.
func TestServiceNames(t *testing.T) {
	samples := []*stacks.Sample{
		{Pid: 10, Tid: 11, Comm: "worker"}, {Pid: 10, Tid: 10, Comm: "web"},
		{Pid: 20, Tid: 21, Comm: "db-io"},
		{Pid: 30, Tid: 31, Comm: "gone-thread"},
		{Pid: 40, Tid: 40, Comm: "kworker/3:1"}, {Pid: 41, Tid: 41, Comm: "kworker/u8:0"},
		{Pid: 50, Tid: 50, Comm: "bad\xff"}, {Pid: 60, Tid: 60, Comm: " "},
	}
	got := processNames(samples, fakeProc(t))
	want := map[uint32]string{10: "web", 20: "db", 30: "gone-thread", 40: "kworker", 41: "kworker", 50: "bad_", 60: "unknown"}
	for pid, name := range want {
		if got[pid] != name {
			t.Errorf("pid %d named %q, want %q", pid, got[pid], name)
		}
	}
	p := &stacks.Profile{Samples: samples}
	var services []string
	for _, it := range splitServices(p, "", fakeProc(t)) {
		services = append(services, it.service)
	}
	if want := []string{"bad_", "db", "gone-thread", "kworker", "unknown", "web"}; !slices.Equal(services, want) {
		t.Errorf("services %q, want %q", services, want)
	}
	if items := splitServices(p, "host", ""); len(items) != 1 || items[0].service != "host" || items[0].profile != p {
		t.Errorf("with a service name: %d items", len(items))
	}
	if items := splitServices(&stacks.Profile{}, "", ""); items != nil {
		t.Errorf("an empty interval gave %d items", len(items))
	}
}

// BenchmarkSplitServices files a busy interval's samples — 5,000 stacks of
// 200 processes, half of them seen only in worker threads, whose names
// come from /proc — under their services.
func BenchmarkSplitServices(b *testing.B) {
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
		splitServices(p, "", "/proc")
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*samples), "ns/sample")
}
