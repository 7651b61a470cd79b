package bpf

import (
	"errors"
	"os"
	"slices"
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
// filter alone (a byte of the thread group's, pidset.h), header the filter
// and a minimal 104-byte record filled and counted, record the same sent
// through a ring buffer, percpu the same sent through a ring of each CPU's
// own (what a ring per CPU would save the sampler). Set beside
// BenchmarkTableWalk's bpf-ns/sample at depth 1, record says how much of a
// shallow sample's cost any program pays there. Each iteration is 100 ms of
// sampling, the rings drained meanwhile.
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
	for _, name := range []string{"empty", "filter", "header", "record", "percpu"} {
		b.Run(name, func(b *testing.B) {
			objs, readers := openFloor(b, online)
			filter, err := mapPidBytes(objs.Pids)
			if err != nil {
				b.Fatal(err)
			}
			defer filter.close()
			for _, pid := range pids {
				if err := filter.add(pid); err != nil {
					b.Fatal(err)
				}
			}
			prog := map[string]*ebpf.Program{"empty": objs.Empty, "filter": objs.Filter, "header": objs.Header,
				"record": objs.Record, "percpu": objs.Percpu}[name]
			stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
			if err != nil {
				b.Skipf("BPF run-time statistics: %v", err)
			}
			defer stats.Close()
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
				// The programs never wake the readers: the first
				// waits out the 100 ms, the others then take what
				// is there.
				for i, rd := range readers {
					wait := time.Duration(0)
					if i == 0 {
						wait = 100 * time.Millisecond
					}
					rd.SetDeadline(time.Now().Add(wait))
					for {
						if err := rd.ReadInto(&rec); errors.Is(err, os.ErrDeadlineExceeded) {
							break
						} else if err != nil {
							b.Fatal(err)
						}
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

// openFloor loads floor.bpf.c with a ring per online CPU in cpu_records,
// and returns its objects and a reader of each ring, the shared one first;
// all are closed when b ends.
func openFloor(b *testing.B, online []int) (*floorObjects, []*ringbuf.Reader) {
	b.Helper()
	spec, err := loadFloor()
	if err != nil {
		b.Fatal(err)
	}
	spec.Maps["cpu_records"].MaxEntries = uint32(slices.Max(online) + 1)
	var objs floorObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { objs.Close() })
	rings := []*ebpf.Map{objs.Records}
	for _, cpu := range online {
		ring, err := ebpf.NewMap(spec.Maps["cpu_records"].InnerMap)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { ring.Close() })
		if err := objs.CpuRecords.Put(uint32(cpu), ring); err != nil {
			b.Fatal(err)
		}
		rings = append(rings, ring)
	}
	var readers []*ringbuf.Reader
	for _, ring := range rings {
		rd, err := ringbuf.NewReader(ring)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { rd.Close() })
		readers = append(readers, rd)
	}
	return &objs, readers
}
