package bpf

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/sprof/sprof/internal/cpus"
)

//go:generate go tool bpf2go -cc clang-22 -strip llvm-strip-22 -target amd64,arm64 floor floor.bpf.c -- -mcpu=v3 -Wall -Werror

// BenchmarkFloor measures what a sampling program pays on this host before
// any work of its own (floor.bpf.c), on BenchmarkTableWalk's events and
// load: a depth-1 fixture per CPU, 499 Hz, the kernel's BPF run-time
// statistics per run. empty is an empty program, filter the sampler's pid
// filter alone (a hash lookup of the thread group), header the filter and
// a minimal 104-byte record filled and counted, record the same sent
// through a ring buffer. Set beside
// BenchmarkTableWalk's bpf-ns/sample at depth 1, record says how much of a
// shallow sample's cost any program pays there. Each iteration is 100 ms
// of sampling, the ring drained meanwhile.
func BenchmarkFloor(b *testing.B) {
	requireFixture(b)
	online, err := cpus.Online()
	if err != nil {
		b.Fatal(err)
	}
	var pids []uint32
	for range online {
		cmd, _ := startBinary(b, deepPath, "1")
		pids = append(pids, uint32(cmd.Process.Pid))
	}
	for _, name := range []string{"empty", "filter", "header", "record"} {
		b.Run(name, func(b *testing.B) {
			var objs floorObjects
			if err := loadFloorObjects(&objs, nil); err != nil {
				b.Fatal(err)
			}
			defer objs.Close()
			for _, pid := range pids {
				if err := objs.Wanted.Put(pid, uint8(1)); err != nil {
					b.Fatal(err)
				}
			}
			prog := map[string]*ebpf.Program{"empty": objs.Empty, "filter": objs.Filter, "header": objs.Header, "record": objs.Record}[name]
			stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
			if err != nil {
				b.Skipf("BPF run-time statistics: %v", err)
			}
			defer stats.Close()
			rd, err := ringbuf.NewReader(objs.Records)
			if err != nil {
				b.Fatal(err)
			}
			defer rd.Close()
			for _, cpu := range online {
				c, err := openCPUClock(cpu, 499, false, prog)
				if err != nil {
					b.Fatal(err)
				}
				defer c.close()
				if err := c.enable(); err != nil {
					b.Fatal(err)
				}
			}
			before, err := prog.Stats()
			if err != nil {
				b.Fatal(err)
			}
			var rec ringbuf.Record
			for b.Loop() {
				rd.SetDeadline(time.Now().Add(100 * time.Millisecond))
				for {
					if err := rd.ReadInto(&rec); errors.Is(err, os.ErrDeadlineExceeded) {
						break
					} else if err != nil {
						b.Fatal(err)
					}
				}
			}
			after, err := prog.Stats()
			if err != nil {
				b.Fatal(err)
			}
			runs := after.RunCount - before.RunCount
			if runs == 0 {
				b.Fatal("no runs")
			}
			b.ReportMetric(float64((after.Runtime-before.Runtime).Nanoseconds())/float64(runs), "bpf-ns/run")
		})
	}
}
