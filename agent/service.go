package agent

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sprof/sprof/stacks"
)

// item is one service's profile of one interval.
type item struct {
	service string
	profile *stacks.Profile
}

// splitServices files p's samples under their services, in name order:
// everything under name when it is set, else each process under its
// command name (see processNames). Services without samples are left out.
func splitServices(p *stacks.Profile, name, procRoot string) []item {
	if len(p.Samples) == 0 {
		return nil
	}
	if name != "" {
		return []item{{name, p}}
	}
	names := processNames(p.Samples, procRoot)
	bySvc := map[string]*stacks.Profile{}
	var order []string
	for _, s := range p.Samples {
		svc := names[s.Pid]
		sp := bySvc[svc]
		if sp == nil {
			sp = &stacks.Profile{Start: p.Start, Duration: p.Duration, Period: p.Period, Mappings: p.Mappings, Lost: p.Lost}
			bySvc[svc] = sp
			order = append(order, svc)
		}
		sp.Samples = append(sp.Samples, s)
	}
	slices.Sort(order)
	items := make([]item, 0, len(order))
	for _, svc := range order {
		items = append(items, item{svc, bySvc[svc]})
	}
	return items
}

// processNames returns the service name of every process with samples: the
// command name of its main thread. Samples carry their own thread's name,
// which for a worker thread is often its pool's ("tokio-runtime-w",
// "C2 CompilerThre"), so a process whose main thread has no sample of its
// own is named from /proc/PID/comm, and from its threads' name only when
// it has exited.
func processNames(samples []*stacks.Sample, procRoot string) map[uint32]string {
	names := map[uint32]string{}
	for _, s := range samples {
		if s.Tid == s.Pid {
			names[s.Pid] = serviceOf(s.Comm)
		}
	}
	for _, s := range samples {
		if _, ok := names[s.Pid]; ok {
			continue
		}
		comm := s.Comm
		if b, err := os.ReadFile(filepath.Join(procRoot, strconv.FormatUint(uint64(s.Pid), 10), "comm")); err == nil {
			comm = strings.TrimSuffix(string(b), "\n")
		}
		names[s.Pid] = serviceOf(comm)
	}
	return names
}

// serviceOf turns a command name into a service name: valid UTF-8, cut at
// the first '/' so that per-CPU kernel threads (kworker/3:1, ksoftirqd/0)
// make one service each, and "unknown" rather than empty.
func serviceOf(comm string) string {
	comm, _, _ = strings.Cut(comm, "/")
	comm = strings.TrimSpace(strings.ToValidUTF8(comm, "_"))
	if comm == "" {
		return "unknown"
	}
	return comm
}
