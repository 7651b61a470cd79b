package exporters

import (
	"fmt"
	"strings"

	"github.com/sprof/sprof/exporters/flamegraph"
	"github.com/sprof/sprof/stacks"
)

// Options tunes the encoders. The zero value gives every format its
// defaults.
type Options struct {
	// Labels lists the per-sample labels of pprof output. nil means
	// DefaultLabels; an empty, non-nil slice means none. Samples whose
	// stacks and label values agree are merged, so dropping tid shrinks
	// the profile.
	Labels []Label
	// MaxDepth caps the locations of a pprof sample; 0 means no cap.
	// Pyroscope cuts stacks deeper than 1,000 itself, keeping the frames
	// nearest the root; a capped stack does the same but ends in a
	// `[truncated]` leaf, so the cut frames' time is not shown as the self
	// time of the deepest frame kept.
	MaxDepth int
	// ProcessRoot adds a root frame naming the process to every format,
	// the way stackcollapse-perf.pl does, so one graph separates programs
	// — also in Pyroscope, where a per-process label would multiply series.
	ProcessRoot ProcessRoot
	// EmptyStack names the one frame every format gives a sample without
	// frames, so its count shows as a frame; "" means EmptyStackFrame.
	// `sprof record -K` calls it "[user]": there a sample without frames
	// is one taken in user mode.
	EmptyStack string
	// FlameGraph shapes SVG output. An empty Subtitle is filled in with
	// what the profile covers; an empty Title with Subject and the
	// profile's start.
	FlameGraph flamegraph.Options
	// Subject names what was profiled — a command line, a host — for the
	// SVG's title, so two graphs side by side say which is which.
	Subject string
	// OTLP shapes OTLP output; Labels does not apply there.
	OTLP OTLPOptions
	// OffCPU makes the formats with one value per stack (folded, SVG,
	// speedscope) show the time threads waited off the CPU
	// (stacks.Sample.OffCPU) instead of CPU samples: folded and SVG in
	// microseconds, as bcc's offcputime folds them, speedscope in
	// nanoseconds. pprof carries both values whatever this says.
	OffCPU bool
}

// weight is what a sample adds to its stack in the one-value formats: CPU
// samples, or with OffCPU nanoseconds off the CPU.
func (o *Options) weight(s *stacks.Sample) int64 {
	if o.OffCPU {
		return s.OffCPU.Nanoseconds()
	}
	return s.Count
}

func (o *Options) emptyStack() string {
	if o.EmptyStack == "" {
		return EmptyStackFrame
	}
	return o.EmptyStack
}

// Label is a per-sample pprof label key.
type Label string

const (
	// LabelComm is the thread's command name (task comm).
	LabelComm Label = "comm"
	// LabelPid is the process ID, a numeric label, so pprof's
	// -tagfocus pid=1234 (and ranges, pid=1000:2000) match it.
	// Pyroscope drops numeric labels, as it should one per process.
	LabelPid Label = "pid"
	// LabelTid is the thread ID, a numeric label like LabelPid.
	LabelTid Label = "tid"
	// LabelContainer is the ID of the container the process runs in
	// (stacks.Sample.Container), the full 64 hex digits; samples of
	// processes in no container have no such label. Pyroscope and Alloy
	// call it container_id too.
	LabelContainer Label = "container_id"
)

// DefaultLabels are the labels pprof output carries unless Options.Labels
// says otherwise.
func DefaultLabels() []Label { return []Label{LabelComm, LabelPid, LabelTid, LabelContainer} }

// ParseLabels reads a comma-separated label list such as "comm,pid", as a
// flag gives it; "" and "none" mean no labels.
func ParseLabels(s string) ([]Label, error) {
	labels := []Label{}
	if s == "" || s == "none" {
		return labels, nil
	}
	seen := map[Label]bool{}
	for _, name := range strings.Split(s, ",") {
		l := Label(strings.TrimSpace(name))
		switch l {
		case LabelComm, LabelPid, LabelTid, LabelContainer:
		default:
			return nil, fmt.Errorf("unknown label %q; labels are: comm, pid, tid, container_id", name)
		}
		if !seen[l] {
			seen[l] = true
			labels = append(labels, l)
		}
	}
	return labels, nil
}

// ProcessRoot selects the root frame that names a sample's process.
type ProcessRoot uint8

const (
	// NoProcessRoot starts stacks at their outermost real frame.
	NoProcessRoot ProcessRoot = iota
	// CommRoot adds the command name, e.g. `nginx`.
	CommRoot
	// CommPidRoot adds the command name and process ID, e.g. `nginx-1234`.
	CommPidRoot
	// ContainerCommRoot adds, above the command name, a frame naming the
	// container of processes that run in one, e.g. `[container
	// 4f797c539e6c]` `nginx`, so a host's graph separates its containers
	// first.
	ContainerCommRoot
)

var processRootNames = [...]string{NoProcessRoot: "none", CommRoot: "comm", CommPidRoot: "comm-pid", ContainerCommRoot: "container-comm"}

func (r ProcessRoot) String() string {
	if int(r) < len(processRootNames) {
		return processRootNames[r]
	}
	return fmt.Sprintf("ProcessRoot(%d)", uint8(r))
}

// ParseProcessRoot reads "none", "comm", "comm-pid" or "container-comm".
func ParseProcessRoot(s string) (ProcessRoot, error) {
	for r, name := range processRootNames {
		if s == name {
			return ProcessRoot(r), nil
		}
	}
	return 0, fmt.Errorf("unknown process root %q; choices are: %s", s, strings.Join(processRootNames[:], ", "))
}
