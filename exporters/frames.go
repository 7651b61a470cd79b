package exporters

import (
	"encoding/binary"
	"strconv"
	"strings"

	"github.com/sprof/sprof/exporters/flamegraph"
	"github.com/sprof/sprof/stacks"
)

// TruncatedFrame is the root frame of a stack whose walk stopped before the
// outermost frame, so the gap is visible rather than the stack looking
// complete.
const TruncatedFrame = "[truncated]"

// EmptyStackFrame names the only frame of a sample that has no frames at
// all, so its count still shows up in the total, unless
// Options.EmptyStack names it otherwise.
const EmptyStackFrame = "[unknown]"

// frame is one display frame of a sample: one inline level of one Location
// or a synthetic frame.
type frame struct {
	name string
	kind flamegraph.Kind
	// loc is the location the frame belongs to and src the inline level
	// of it; loc is nil for synthetic frames, src also for placeholders.
	loc *stacks.Location
	src *stacks.Frame
}

// rootFirst appends the display frames of s to dst, outermost first: the
// process root if asked for, `[truncated]` if the walk stopped early (or
// opt's empty-stack frame if there are no frames), then every inline level
// of every Location, innermost inline level last.
func rootFirst(dst []frame, s *stacks.Sample, opt *Options) []frame {
	root := opt.ProcessRoot
	if name := containerRootName(s, root); name != "" {
		dst = append(dst, frame{name: name, kind: flamegraph.Synthetic})
	}
	if name := processRootName(s, root); name != "" {
		dst = append(dst, frame{name: name, kind: flamegraph.Synthetic})
	}
	if s.Truncated {
		dst = append(dst, frame{name: TruncatedFrame, kind: flamegraph.Synthetic})
	} else if len(s.Stack) == 0 {
		dst = append(dst, frame{name: opt.emptyStack(), kind: flamegraph.Synthetic})
	}
	parts := stackParts(nil, s.Stack)
	for i := len(parts) - 1; i >= 0; i-- {
		part := parts[i]
		loc := part.loc
		kernel := loc.Mapping != nil && loc.Mapping.Kind == stacks.Kernel
		jit := loc.Mapping != nil && loc.Mapping.Kind == stacks.JIT
		python := loc.Mapping != nil && loc.Mapping.Kind == stacks.Python
		if !loc.Symbolized() {
			kind := flamegraph.Unsymbolized
			if kernel {
				kind = flamegraph.Kernel
			}
			dst = append(dst, frame{name: loc.Placeholder(), kind: kind, loc: loc})
			continue
		}
		for j := part.hi - 1; j >= part.lo; j-- {
			kind := flamegraph.User
			switch {
			case kernel:
				kind = flamegraph.Kernel
			case jit:
				kind = flamegraph.JIT
			case python:
				kind = flamegraph.Python
			case j < len(loc.Frames)-1:
				kind = flamegraph.Inlined
			}
			dst = append(dst, frame{name: functionName(loc, j), kind: kind, loc: loc, src: &loc.Frames[j]})
		}
	}
	return dst
}

// processRootName is the root frame naming s's process, with spaces turned
// into underscores as stackcollapse-perf.pl does; "" for NoProcessRoot.
func processRootName(s *stacks.Sample, root ProcessRoot) string {
	comm := strings.ReplaceAll(cleanName(s.Comm), " ", "_")
	if comm == "" {
		comm = "[unknown]"
	}
	switch root {
	case CommRoot, ContainerCommRoot:
		return comm
	case CommPidRoot:
		return comm + "-" + strconv.FormatUint(uint64(s.Pid), 10)
	}
	return ""
}

// containerRootName is the frame above the process root that names s's
// container, `[container 4f797c539e6c]` with the short ID that `docker ps`
// shows; "" unless root is ContainerCommRoot and s runs in a container.
func containerRootName(s *stacks.Sample, root ProcessRoot) string {
	if root != ContainerCommRoot || s.Container == "" {
		return ""
	}
	id := cleanName(s.Container)
	if len(id) > shortContainerID {
		id = id[:shortContainerID]
	}
	return "[container " + id + "]"
}

// shortContainerID is the length of the short form of a container ID that
// runtimes' tools show and accept.
const shortContainerID = 12

// functionName is the name of inline level j of loc, or loc's placeholder
// when the symbolizer left the name empty, so no frame is ever nameless.
func functionName(loc *stacks.Location, j int) string {
	if name := loc.Frames[j].Function; name != "" {
		return name
	}
	return loc.Placeholder()
}

// weightedStack is one distinct display stack and its total count.
type weightedStack struct {
	// sample is the first sample with this stack; rootFirst(sample) gives
	// the frames.
	sample *stacks.Sample
	count  int64
}

// aggregate merges the samples that display the same — same
// Locations, same truncation, same process root — keeping first-seen
// order, and drops samples with a weight (opt.weight) below one. Comparing Location
// pointers instead of rendered names keeps the cost per sample at one map
// lookup per frame; stacks that differ only by pointer merge later, when
// their names are compared.
func aggregate(samples []*stacks.Sample, opt *Options) []weightedStack {
	root := opt.ProcessRoot
	ids := map[*stacks.Location]uint64{}
	index := map[string]int{}
	var out []weightedStack
	var key []byte
	for _, s := range samples {
		w := opt.weight(s)
		if w <= 0 {
			continue
		}
		key = binary.AppendUvarint(key[:0], uint64(len(s.Stack)))
		for _, loc := range s.Stack {
			id, ok := ids[loc]
			if !ok {
				id = uint64(len(ids))
				ids[loc] = id
			}
			key = binary.AppendUvarint(key, id)
		}
		if s.Truncated {
			key = append(key, 1)
		} else {
			key = append(key, 0)
		}
		key = append(key, containerRootName(s, root)...)
		key = append(key, 0)
		key = append(key, processRootName(s, root)...)
		if i, ok := index[string(key)]; ok {
			out[i].count += w
			continue
		}
		index[string(key)] = len(out)
		out = append(out, weightedStack{s, w})
	}
	return out
}
