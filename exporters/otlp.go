package exporters

import (
	"cmp"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/google/pprof/profile"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	profilespb "go.opentelemetry.io/proto/otlp/profiles/v1development"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/sprof/sprof/stacks"
)

// OTLPOptions shape OTLP output.
type OTLPOptions struct {
	// HostName is every resource's host.name; none when "".
	HostName string
	// Service returns the service.name of a sample's process; nil names
	// each process after the command of its main thread.
	Service func(*stacks.Sample) string
	// ScopeVersion is the instrumentation scope's version, sprof's own.
	ScopeVersion string
	// NoSampleAttributes leaves the process and thread attributes off the
	// samples. Grafana Pyroscope files every distinct set of a sample's
	// attributes as a series of its own, so with them every thread of
	// every process would be a series, against the server's series limit
	// and its query cost; without them a series is a resource.
	NoSampleAttributes bool
}

// Semantic-convention attribute names (OpenTelemetry semantic conventions,
// resource and profiles registries).
const (
	attrServiceName    = "service.name"
	attrHostName       = "host.name"
	attrProcessPid     = "process.pid"
	attrExecutableName = "process.executable.name"
	attrExecutablePath = "process.executable.path"
	attrBuildIDGNU     = "process.executable.build_id.gnu"
	attrContainerID    = "container.id"
	attrThreadID       = "thread.id"
	attrThreadName     = "thread.name"
)

// otlpScope names sprof as the instrumentation scope.
const otlpScope = "sprof"

// maxOTLPSamples caps the samples of one OTLP Profile: Pyroscope turns
// each Profile into a pprof and refuses those over 16,000 samples
// (-validation.max-profile-stacktrace-samples), so a busier process is
// sent as several Profiles.
const maxOTLPSamples = 15_000

// WriteOTLP writes p as an OTLP ProfilesData protobuf
// (opentelemetry.proto.profiles.v1development), the body of an OTLP
// export request.
func WriteOTLP(w io.Writer, p *stacks.Profile, opt Options) error {
	data, err := BuildOTLP(p, opt)
	if err != nil {
		return err
	}
	b, err := proto.Marshal(data)
	if err != nil {
		return fmt.Errorf("otlp: %w", err)
	}
	_, err = w.Write(b)
	return err
}

// WriteOTLPJSON writes p as OTLP ProfilesData in the protobuf JSON
// mapping, the body of an OTLP/HTTP JSON export request.
func WriteOTLPJSON(w io.Writer, p *stacks.Profile, opt Options) error {
	data, err := BuildOTLP(p, opt)
	if err != nil {
		return err
	}
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(data)
	if err != nil {
		return fmt.Errorf("otlp: %w", err)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// BuildOTLP converts p into OTLP profiles: one resource per service and
// container — service.name, host.name and container.id, as the semantic
// conventions name them — holding one CPU profile (sample type
// samples/count, period type cpu/nanoseconds, as the OpenTelemetry eBPF
// profiler sends) whose samples carry the process and thread:
// process.pid, process.executable.name and .path, thread.id and
// thread.name. All resources share one dictionary.
//
// A profile with off-CPU time (p.OffCPU) adds, per resource, an off-CPU
// profile: an OTLP profile has one sample type, and the schema names
// off_cpu/nanoseconds for it. Its samples' values are the nanoseconds
// threads waited with that stack, every wait recorded (period type
// off_cpu/nanoseconds, period 1, as pprof output says it). Without CPU
// sampling (p.Period 0) it is the only profile.
//
// Resources are not per process: a receiver such as Pyroscope files each
// resource as its own series, and a process per series would churn
// through a server's series limit on every restart and every forked
// worker (the OpenTelemetry eBPF profiler keeps process attributes on its
// samples too).
//
// Unlike the OpenTelemetry eBPF profiler, which leaves native frames to a
// backend symbolizer, every frame arrives named: the locations are those
// of BuildPprof — inline frames as several lines, innermost first,
// placeholders such as `libc.so.6+0x1a2b` where no symbol covers an
// address, `[truncated]` roots — and mappings carry their GNU build IDs
// as process.executable.build_id.gnu.
func BuildOTLP(p *stacks.Profile, opt Options) (*profilespb.ProfilesData, error) {
	opt.Labels = []Label{LabelPid, LabelTid, LabelComm, LabelContainer}
	pp, err := BuildPprof(p, opt)
	if err != nil {
		return nil, err
	}
	b := newOTLPBuilder(pp)
	b.noSampleAttributes = opt.OTLP.NoSampleAttributes
	procs := processesOf(p.Samples, opt.OTLP.Service)
	// The pprof values: [samples, cpu ns] with CPU sampling, then off-CPU
	// ns with p.OffCPU.
	cpu, off := p.Period > 0, -1
	if p.OffCPU {
		off = len(pp.SampleType) - 1
	}
	type key struct{ service, container string }
	type kinds struct{ cpu, off []*profilespb.Sample }
	byKey := map[key]*kinds{}
	var keys []key
	for _, s := range pp.Sample {
		pid, ok := numLabel(s, LabelPid)
		if !ok {
			return nil, fmt.Errorf("otlp: a sample without a pid")
		}
		info := procs[uint32(pid)]
		k := key{info.service, info.container}
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
			byKey[k] = &kinds{}
		}
		if cpu && s.Value[0] > 0 {
			byKey[k].cpu = append(byKey[k].cpu, b.sample(s, s.Value[0], uint32(pid), info))
		}
		if off >= 0 && s.Value[off] > 0 {
			byKey[k].off = append(byKey[k].off, b.sample(s, s.Value[off], uint32(pid), info))
		}
	}
	slices.SortFunc(keys, func(a, b key) int {
		return cmp.Or(strings.Compare(a.service, b.service), strings.Compare(a.container, b.container))
	})
	data := &profilespb.ProfilesData{Dictionary: b.dict}
	cpuType := otlpProfileType{sample: [2]string{"samples", "count"}, period: [2]string{"cpu", "nanoseconds"}, every: pp.Period}
	offType := otlpProfileType{sample: [2]string{"off_cpu", "nanoseconds"}, period: [2]string{"off_cpu", "nanoseconds"}, every: 1}
	for _, k := range keys {
		sp := &profilespb.ScopeProfiles{Scope: &commonpb.InstrumentationScope{Name: otlpScope, Version: opt.OTLP.ScopeVersion}}
		for samples := range slices.Chunk(byKey[k].cpu, maxOTLPSamples) {
			sp.Profiles = append(sp.Profiles, b.profile(pp, cpuType, samples))
		}
		for samples := range slices.Chunk(byKey[k].off, maxOTLPSamples) {
			sp.Profiles = append(sp.Profiles, b.profile(pp, offType, samples))
		}
		attrs := []*commonpb.KeyValue{strAttr(attrServiceName, k.service)}
		if opt.OTLP.HostName != "" {
			attrs = append(attrs, strAttr(attrHostName, opt.OTLP.HostName))
		}
		if k.container != "" {
			attrs = append(attrs, strAttr(attrContainerID, k.container))
		}
		data.ResourceProfiles = append(data.ResourceProfiles, &profilespb.ResourceProfiles{
			Resource:      &resourcepb.Resource{Attributes: attrs},
			ScopeProfiles: []*profilespb.ScopeProfiles{sp},
		})
	}
	return data, nil
}

// numLabel is the value of a pprof sample's numeric label l.
func numLabel(s *profile.Sample, l Label) (int64, bool) {
	if v := s.NumLabel[string(l)]; len(v) > 0 {
		return v[0], true
	}
	return 0, false
}

// label is the value of a pprof sample's label l, "" if it has none.
func label(s *profile.Sample, l Label) string {
	if v := s.Label[string(l)]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// processInfo is what the attributes say of a process.
type processInfo struct {
	service, comm, container string
	exe                      *stacks.Mapping
}

func strAttr(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}

// processesOf gathers what the resource of each process says: its
// service (service, or its main thread's command), the command of its
// main thread (else of its busiest thread), its container, and its
// executable — the file most likely to be one (executableRank) among the
// user mappings its stacks pass through, the most samples breaking ties.
func processesOf(samples []*stacks.Sample, service func(*stacks.Sample) string) map[uint32]processInfo {
	type acc struct {
		info    processInfo
		main    bool // info.comm is the main thread's
		through map[*stacks.Mapping]int64
		first   *stacks.Sample
	}
	accs := map[uint32]*acc{}
	for _, s := range samples {
		weight := s.Count
		if s.OffCPU > 0 {
			weight++ // a wait weighs as a sample: the executable is the same
		}
		if weight <= 0 {
			continue
		}
		a := accs[s.Pid]
		if a == nil {
			a = &acc{info: processInfo{comm: s.Comm, container: s.Container}, through: map[*stacks.Mapping]int64{}, first: s}
			accs[s.Pid] = a
		}
		if s.Tid == s.Pid && !a.main {
			a.info.comm, a.main, a.first = s.Comm, true, s
		}
		var seen []*stacks.Mapping
		for _, loc := range s.Stack {
			if m := loc.Mapping; m != nil && m.Kind == stacks.User && !slices.Contains(seen, m) {
				seen = append(seen, m)
				a.through[m] += weight
			}
		}
	}
	out := make(map[uint32]processInfo, len(accs))
	for pid, a := range accs {
		if service != nil {
			a.info.service = service(a.first)
		}
		a.info.service = cleanName(cmp.Or(a.info.service, a.info.comm, "unknown"))
		a.info.comm, a.info.container = cleanName(a.info.comm), cleanName(a.info.container)
		for m, n := range a.through {
			best := a.info.exe
			if best == nil || executableRank(m.File) < executableRank(best.File) ||
				executableRank(m.File) == executableRank(best.File) && (n > a.through[best] || n == a.through[best] && m.File < best.File) {
				a.info.exe = m
			}
		}
		if a.info.exe != nil && executableRank(a.info.exe.File) > 1 {
			a.info.exe = nil // not a file: no executable to name
		}
		out[pid] = a.info
	}
	return out
}

// otlpBuilder fills one ProfilesDictionary from a pprof profile. Every
// table starts with its zero entry, as the format requires.
type otlpBuilder struct {
	dict      *profilespb.ProfilesDictionary
	strings   map[string]int32
	attrs     map[string]int32 // key, a type byte, value
	mappings  map[*profile.Mapping]int32
	functions map[*profile.Function]int32
	locations map[*profile.Location]int32
	stacks    map[string]int32
	key       []byte
	// noSampleAttributes is OTLPOptions.NoSampleAttributes.
	noSampleAttributes bool
}

func newOTLPBuilder(pp *profile.Profile) *otlpBuilder {
	b := &otlpBuilder{
		dict: &profilespb.ProfilesDictionary{
			MappingTable:   []*profilespb.Mapping{{}},
			LocationTable:  []*profilespb.Location{{}},
			FunctionTable:  []*profilespb.Function{{}},
			LinkTable:      []*profilespb.Link{{}},
			StringTable:    []string{""},
			AttributeTable: []*profilespb.KeyValueAndUnit{{}},
			StackTable:     []*profilespb.Stack{{}},
		},
		strings:   map[string]int32{"": 0},
		attrs:     map[string]int32{},
		mappings:  map[*profile.Mapping]int32{},
		functions: map[*profile.Function]int32{},
		locations: map[*profile.Location]int32{},
		stacks:    map[string]int32{},
	}
	for _, m := range pp.Mapping {
		om := &profilespb.Mapping{MemoryStart: m.Start, MemoryLimit: m.Limit, FileOffset: m.Offset, FilenameStrindex: b.str(m.File)}
		if m.BuildID != "" {
			om.AttributeIndices = []int32{b.attr(attrBuildIDGNU, m.BuildID)}
		}
		b.mappings[m] = int32(len(b.dict.MappingTable))
		b.dict.MappingTable = append(b.dict.MappingTable, om)
	}
	for _, f := range pp.Function {
		b.functions[f] = int32(len(b.dict.FunctionTable))
		b.dict.FunctionTable = append(b.dict.FunctionTable, &profilespb.Function{
			NameStrindex: b.str(f.Name), SystemNameStrindex: b.str(f.SystemName), FilenameStrindex: b.str(f.Filename), StartLine: f.StartLine})
	}
	for _, l := range pp.Location {
		ol := &profilespb.Location{MappingIndex: b.mappings[l.Mapping], Address: l.Address}
		for _, ln := range l.Line {
			ol.Lines = append(ol.Lines, &profilespb.Line{FunctionIndex: b.functions[ln.Function], Line: ln.Line, Column: ln.Column})
		}
		b.locations[l] = int32(len(b.dict.LocationTable))
		b.dict.LocationTable = append(b.dict.LocationTable, ol)
	}
	return b
}

func (b *otlpBuilder) str(s string) int32 {
	if i, ok := b.strings[s]; ok {
		return i
	}
	i := int32(len(b.dict.StringTable))
	b.strings[s] = i
	b.dict.StringTable = append(b.dict.StringTable, s)
	return i
}

// attr returns the index of the string attribute k=v.
func (b *otlpBuilder) attr(k, v string) int32 {
	return b.attribute(k+"\x00"+v, k, &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}})
}

// intAttr returns the index of the integer attribute k=v.
func (b *otlpBuilder) intAttr(k string, v int64) int32 {
	return b.attribute(k+"\x01"+strconv.FormatInt(v, 10), k, &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v}})
}

// attribute returns the index of the attribute k=v, adding it under key
// when it is new.
func (b *otlpBuilder) attribute(key, k string, v *commonpb.AnyValue) int32 {
	if i, ok := b.attrs[key]; ok {
		return i
	}
	i := int32(len(b.dict.AttributeTable))
	b.attrs[key] = i
	b.dict.AttributeTable = append(b.dict.AttributeTable, &profilespb.KeyValueAndUnit{KeyStrindex: b.str(k), Value: v})
	return i
}

// sample converts a pprof sample of process pid with one of its values:
// its stack (leaf first, as in pprof), the value, and its process and
// thread as attributes.
func (b *otlpBuilder) sample(s *profile.Sample, value int64, pid uint32, proc processInfo) *profilespb.Sample {
	key := b.key[:0]
	for _, l := range s.Location {
		key = binary.AppendUvarint(key, uint64(b.locations[l]))
	}
	b.key = key
	stack, ok := b.stacks[string(key)]
	if !ok {
		st := &profilespb.Stack{LocationIndices: make([]int32, len(s.Location))}
		for i, l := range s.Location {
			st.LocationIndices[i] = b.locations[l]
		}
		stack = int32(len(b.dict.StackTable))
		b.stacks[string(key)] = stack
		b.dict.StackTable = append(b.dict.StackTable, st)
	}
	os := &profilespb.Sample{StackIndex: stack, Values: []int64{value}}
	if b.noSampleAttributes {
		return os
	}
	os.AttributeIndices = append(os.AttributeIndices, b.intAttr(attrProcessPid, int64(pid)))
	if proc.comm != "" {
		os.AttributeIndices = append(os.AttributeIndices, b.attr(attrExecutableName, proc.comm))
	}
	if proc.exe != nil {
		os.AttributeIndices = append(os.AttributeIndices, b.attr(attrExecutablePath, cleanName(proc.exe.File)))
	}
	if tid, ok := numLabel(s, LabelTid); ok {
		os.AttributeIndices = append(os.AttributeIndices, b.intAttr(attrThreadID, tid))
	}
	if comm := label(s, LabelComm); comm != "" {
		os.AttributeIndices = append(os.AttributeIndices, b.attr(attrThreadName, comm))
	}
	return os
}

// otlpProfileType is what an OTLP profile's values are: its sample type
// and period type, as type and unit, and its period.
type otlpProfileType struct {
	sample, period [2]string
	every          int64
}

// profile is one OTLP profile of samples of type t, timed as pp.
func (b *otlpBuilder) profile(pp *profile.Profile, t otlpProfileType, samples []*profilespb.Sample) *profilespb.Profile {
	id := make([]byte, 16)
	rand.Read(id) // never fails, per crypto/rand
	return &profilespb.Profile{
		SampleType:   &profilespb.ValueType{TypeStrindex: b.str(t.sample[0]), UnitStrindex: b.str(t.sample[1])},
		PeriodType:   &profilespb.ValueType{TypeStrindex: b.str(t.period[0]), UnitStrindex: b.str(t.period[1])},
		Period:       t.every,
		TimeUnixNano: uint64(max(pp.TimeNanos, 0)),
		DurationNano: uint64(max(pp.DurationNanos, 0)),
		ProfileId:    id,
		Samples:      samples,
	}
}
