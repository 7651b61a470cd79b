package pyroscope

import (
	"cmp"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sprof/sprof/stacks"
)

// Series is the part of a profile that one set of series labels files:
// the samples of one service, and of one container when its processes
// run in one.
type Series struct {
	// Service is the service_name label.
	Service string
	// Container is the container_id label, the full ID of the container
	// the samples' processes run in; no label when "".
	Container string
	Profile   *stacks.Profile
}

// Split files p's samples under their series: the service that service
// names, and the container of the sample's process (stacks.Sample.
// Container). Series come sorted by service, then container; there is
// none without samples.
//
// A container's ID is a label rather than the service name because
// without asking the container runtime — which sprof does not — its
// name (Docker's container name, Kubernetes' namespace/container, which
// Alloy's discovery puts in service_name) is unknown, and a 64-digit
// service name says nothing in a service picker. So a container's
// processes are named like any other, by command, and container_id tells
// two containers running the same program apart, as Alloy labels its
// eBPF profiles with container_id too.
func Split(p *stacks.Profile, service func(*stacks.Sample) string) []Series {
	type key struct{ service, container string }
	bySeries := map[key]*stacks.Profile{}
	var keys []key
	for _, s := range p.Samples {
		k := key{service(s), s.Container}
		sp := bySeries[k]
		if sp == nil {
			sp = &stacks.Profile{Start: p.Start, Duration: p.Duration, Period: p.Period, OffCPU: p.OffCPU, Mappings: p.Mappings, Lost: p.Lost}
			bySeries[k] = sp
			keys = append(keys, k)
		}
		sp.Samples = append(sp.Samples, s)
	}
	slices.SortFunc(keys, func(a, b key) int {
		return cmp.Or(strings.Compare(a.service, b.service), strings.Compare(a.container, b.container))
	})
	out := make([]Series, 0, len(keys))
	for _, k := range keys {
		out = append(out, Series{Service: k.service, Container: k.container, Profile: bySeries[k]})
	}
	return out
}

// Services returns the service of each of samples: name for all of them
// when it is set, else each process's own, named after the command of its
// main thread. Samples carry their own thread's name, which for a worker
// thread is often its pool's ("tokio-runtime-w", "C2 CompilerThre"), so a
// process whose main thread has no sample of its own is named from
// procRoot/PID/comm (procRoot is normally /proc; "" reads nothing), and
// after its threads only when that fails (the process has exited). See
// ServiceOf for how a command becomes a service name.
func Services(name string, samples []*stacks.Sample, procRoot string) func(*stacks.Sample) string {
	if name != "" {
		return func(*stacks.Sample) string { return name }
	}
	names := map[uint32]string{}
	for _, s := range samples {
		if s.Tid == s.Pid {
			names[s.Pid] = ServiceOf(s.Comm)
		}
	}
	for _, s := range samples {
		if _, ok := names[s.Pid]; ok {
			continue
		}
		comm := s.Comm
		if procRoot != "" {
			if b, err := os.ReadFile(filepath.Join(procRoot, strconv.FormatUint(uint64(s.Pid), 10), "comm")); err == nil {
				comm = strings.TrimSuffix(string(b), "\n")
			}
		}
		names[s.Pid] = ServiceOf(comm)
	}
	return func(s *stacks.Sample) string { return names[s.Pid] }
}

// ServiceOf turns a command name into a service name: valid UTF-8, cut at
// the first '/' so that per-CPU kernel threads (kworker/3:1, ksoftirqd/0)
// make one service each, and "unknown" rather than empty.
func ServiceOf(comm string) string {
	comm, _, _ = strings.Cut(comm, "/")
	comm = strings.TrimSpace(strings.ToValidUTF8(comm, "_"))
	if comm == "" {
		return "unknown"
	}
	return comm
}
