package exporters

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/pprof/profile"
	"github.com/sprof/sprof/internal/gz"
	"github.com/sprof/sprof/stacks"
)

// WritePprof writes p as a gzip-compressed pprof profile.
func WritePprof(w io.Writer, p *stacks.Profile, opt Options) error {
	var pw PprofWriter
	return pw.Write(w, p, opt)
}

// A PprofWriter writes gzip-compressed pprof profiles as WritePprof does,
// keeping its compressor's state between calls: a caller that writes
// many (the agent, a profile per service per interval) keeps one. It is
// safe for concurrent use.
type PprofWriter struct {
	gz gz.Compressor
}

// Write writes p as a gzip-compressed pprof profile.
func (pw *PprofWriter) Write(w io.Writer, p *stacks.Profile, opt Options) error {
	pp, err := BuildPprof(p, opt)
	if err != nil {
		return err
	}
	var raw bytes.Buffer
	if err := pp.WriteUncompressed(&raw); err != nil {
		return fmt.Errorf("write pprof: %w", err)
	}
	if err := pw.gz.Write(w, raw.Bytes()); err != nil {
		return fmt.Errorf("write pprof: %w", err)
	}
	return nil
}

// BuildPprof converts p into a pprof profile of the Go runtime's CPU shape:
// sample types samples/count and cpu/nanoseconds, values [n, n·period].
// A profile with off-CPU time (p.OffCPU) has a third sample type,
// off_cpu/nanoseconds, the time threads waited with that stack, and cpu
// stays the default (`go tool pprof -sample_index=off_cpu` switches);
// without CPU sampling (p.Period 0) off_cpu/nanoseconds is the only one.
// The result has passed CheckPprof.
//
// Mappings come user first, then [kernel.kallsyms], then [unknown]. pprof
// calls the first one the main binary and names it in every report's
// header ("File: nginx"), so the first is the executable of the process
// with the most samples (see mainMapping), not whichever mapping came
// first. A mapping is marked HasFunctions when at least one of its
// addresses symbolized or sprof tried to symbolize it
// (stacks.Mapping.SymbolsTried), so that pprof does not try again, fail,
// and say so for every binary since deleted; the other Has* flags only
// when lines or inline frames really are there. An address no symbol
// covers keeps its address and gets its placeholder (`libc.so.6+0x1a2b`)
// as function name: pprof's flame graph drops frames without a name, and
// pprof still replaces the placeholder when it finds the binary of a
// mapping sprof did not try (recorded without symbolization). Location slices and label maps are shared between samples
// with equal stacks or label values: treat them as read-only.
func BuildPprof(p *stacks.Profile, opt Options) (*profile.Profile, error) {
	if p.Period <= 0 && !p.OffCPU {
		return nil, errors.New("pprof: the profile has no sampling period")
	}
	b := newPprofBuilder(p, opt)
	for _, s := range p.Samples {
		if (b.cpu && s.Count > 0) || (p.OffCPU && s.OffCPU > 0) {
			b.addSample(s)
		}
	}
	b.finish(b.mainMapping(p.Samples))
	if err := CheckPprof(b.out); err != nil {
		return nil, fmt.Errorf("pprof: %w", err)
	}
	return b.out, nil
}

// pprofMapping is a pprof Mapping under construction.
type pprofMapping struct {
	m    *profile.Mapping
	kind stacks.MappingKind
	// symbolized is set once one of the mapping's addresses has a symbol,
	// or sprof tried to find them (stacks.Mapping.SymbolsTried).
	symbolized bool
	// lo and hi bound the addresses seen, to size the synthetic mappings.
	lo, hi uint64
}

// mappingKey identifies a pprof mapping: user mappings by what the maps
// file says, the kernel and unknown addresses each as one mapping.
type mappingKey struct {
	kind                 stacks.MappingKind
	start, limit, offset uint64
	file, buildID        string
}

type locationKey struct {
	m      *pprofMapping
	addr   uint64
	lo, hi int // the inline levels, a locPart's
}

type functionKey struct{ name, systemName, file string }

type labelKey struct {
	comm, container string
	pid, tid        uint32
}

// sampleKey identifies a pprof sample: a stack and its label values.
type sampleKey struct {
	stack  int
	labels labelKey
}

type pprofBuilder struct {
	out      *profile.Profile
	period   int64
	cpu      bool // the values start with samples/count, cpu/nanoseconds
	offCPU   bool // the last value is off_cpu/nanoseconds
	labels   []Label
	maxDepth int
	mappings map[mappingKey]*pprofMapping
	// byMapping and byLocation remember the value-keyed lookups of
	// mappings and locations per pointer: inputs share Mappings and
	// Locations, and a pointer hashes far faster than a file name.
	byMapping  map[*stacks.Mapping]*pprofMapping
	byLocation map[locPart]*profile.Location
	parts      []locPart // scratch for stackParts
	order      []*pprofMapping
	locations  map[locationKey]*profile.Location
	functions  map[functionKey]*profile.Function
	// stackIDs numbers the distinct location sequences, keyed by their
	// location IDs; samples that differ only in labels share the slice.
	stackIDs  map[string]int
	stacks    [][]*profile.Location
	samples   map[sampleKey]*profile.Sample
	labelMaps map[labelKey]sampleLabels
	// pidSamples counts the samples of each process, for mainMapping.
	pidSamples map[uint32]int64
	synthetic  map[string]*profile.Location
	root       ProcessRoot
	emptyStack string
	// key and locs are scratch space reused for every sample.
	key  []byte
	locs []*profile.Location
}

func newPprofBuilder(p *stacks.Profile, opt Options) *pprofBuilder {
	period := p.Period.Nanoseconds()
	out := &profile.Profile{
		PeriodType:    &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:        period,
		DurationNanos: p.Duration.Nanoseconds(),
	}
	cpu := period > 0
	if cpu {
		out.SampleType = []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}}
	}
	if p.OffCPU {
		out.SampleType = append(out.SampleType, &profile.ValueType{Type: "off_cpu", Unit: "nanoseconds"})
		if cpu {
			out.DefaultSampleType = "cpu"
		} else {
			// Every nanosecond off the CPU is recorded, none sampled.
			out.PeriodType, out.Period = &profile.ValueType{Type: "off_cpu", Unit: "nanoseconds"}, 1
		}
	}
	if !p.Start.IsZero() {
		out.TimeNanos = p.Start.UnixNano()
	}
	if p.Lost > 0 {
		out.Comments = []string{"lost samples: " + strconv.FormatUint(p.Lost, 10)}
	}
	labels := opt.Labels
	if labels == nil {
		labels = DefaultLabels()
	}
	return &pprofBuilder{
		out:        out,
		period:     period,
		cpu:        cpu,
		offCPU:     p.OffCPU,
		labels:     labels,
		maxDepth:   max(opt.MaxDepth, 0),
		mappings:   map[mappingKey]*pprofMapping{},
		byMapping:  map[*stacks.Mapping]*pprofMapping{},
		byLocation: map[locPart]*profile.Location{},
		locations:  map[locationKey]*profile.Location{},
		functions:  map[functionKey]*profile.Function{},
		stackIDs:   map[string]int{},
		samples:    map[sampleKey]*profile.Sample{},
		labelMaps:  map[labelKey]sampleLabels{},
		pidSamples: map[uint32]int64{},
		synthetic:  map[string]*profile.Location{},
		root:       opt.ProcessRoot,
		emptyStack: opt.emptyStack(),
	}
}

// addSample adds s, merging it into an earlier sample with the same stack
// and label values.
func (b *pprofBuilder) addSample(s *stacks.Sample) {
	b.pidSamples[s.Pid] += b.weight(s)
	locs := b.locs[:0]
	b.parts = stackParts(b.parts[:0], s.Stack)
	for _, part := range b.parts {
		locs = append(locs, b.location(part))
	}
	if s.Truncated {
		locs = append(locs, b.syntheticLocation(TruncatedFrame))
	} else if len(s.Stack) == 0 {
		locs = append(locs, b.syntheticLocation(b.emptyStack))
	}
	if name := processRootName(s, b.root); name != "" {
		locs = append(locs, b.syntheticLocation(name))
	}
	if name := containerRootName(s, b.root); name != "" {
		locs = append(locs, b.syntheticLocation(name))
	}
	if b.maxDepth > 0 && len(locs) > b.maxDepth {
		kept := len(locs) - (b.maxDepth - 1)
		locs[kept-1] = b.syntheticLocation(TruncatedFrame)
		locs = append(locs[:0], locs[kept-1:]...)
	}
	b.locs = locs

	key := b.key[:0]
	for _, l := range locs {
		key = binary.AppendUvarint(key, l.ID)
	}
	b.key = key
	stack, ok := b.stackIDs[string(key)]
	if !ok {
		stack = len(b.stacks)
		b.stackIDs[string(key)] = stack
		b.stacks = append(b.stacks, slices.Clone(locs))
	}

	sk := sampleKey{stack, b.labelKey(s)}
	if smp, ok := b.samples[sk]; ok {
		b.addValues(smp.Value, s)
		return
	}
	labels := b.sampleLabels(sk.labels)
	smp := &profile.Sample{
		Location: b.stacks[stack],
		Value:    make([]int64, len(b.out.SampleType)),
		Label:    labels.str,
		NumLabel: labels.num,
	}
	b.addValues(smp.Value, s)
	b.samples[sk] = smp
	b.out.Sample = append(b.out.Sample, smp)
}

// weight is what ranks processes and mappings for mainMapping: CPU
// samples, or in a profile of off-CPU time alone, the time.
func (b *pprofBuilder) weight(s *stacks.Sample) int64 {
	if b.cpu {
		return s.Count
	}
	return s.OffCPU.Nanoseconds()
}

// addValues adds s's values to v, laid out as the sample types.
func (b *pprofBuilder) addValues(v []int64, s *stacks.Sample) {
	if b.cpu {
		v[0] += s.Count
		v[1] += s.Count * b.period
	}
	if b.offCPU {
		v[len(v)-1] += s.OffCPU.Nanoseconds()
	}
}

// labelKey keeps of s's identity only what the configured labels show.
func (b *pprofBuilder) labelKey(s *stacks.Sample) labelKey {
	var k labelKey
	for _, l := range b.labels {
		switch l {
		case LabelComm:
			k.comm = s.Comm
		case LabelPid:
			k.pid = s.Pid
		case LabelTid:
			k.tid = s.Tid
		case LabelContainer:
			k.container = s.Container
		}
	}
	return k
}

// sampleLabels are a sample's string and numeric pprof labels, shared by
// the samples with the same values.
type sampleLabels struct {
	str map[string][]string
	num map[string][]int64
}

// sampleLabels returns the labels of k. Names are strings; pid and tid are
// numbers, which pprof's -tagfocus pid=1234 and ranges (pid=1000:2000)
// match. They are not strings as well: pprof then counts each sample twice
// under -tags (a pid "Total" of 200%) and -tagroot pid names frames
// "1234,1234".
func (b *pprofBuilder) sampleLabels(k labelKey) sampleLabels {
	if len(b.labels) == 0 {
		return sampleLabels{}
	}
	if m, ok := b.labelMaps[k]; ok {
		return m
	}
	var m sampleLabels
	str := func(l Label, v string) {
		if m.str == nil {
			m.str = map[string][]string{}
		}
		m.str[string(l)] = []string{cleanName(v)}
	}
	num := func(l Label, v uint32) {
		if m.num == nil {
			m.num = map[string][]int64{}
		}
		m.num[string(l)] = []int64{int64(v)}
	}
	for _, l := range b.labels {
		switch l {
		case LabelComm:
			if k.comm != "" {
				str(l, k.comm)
			}
		case LabelPid:
			num(l, k.pid)
		case LabelTid:
			num(l, k.tid)
		case LabelContainer:
			if k.container != "" {
				str(l, k.container)
			}
		}
	}
	b.labelMaps[k] = m
	return m
}

func (b *pprofBuilder) mapping(m *stacks.Mapping) *pprofMapping {
	if pm, ok := b.byMapping[m]; ok {
		return pm
	}
	pm := b.mappingByValue(m)
	pm.symbolized = pm.symbolized || m != nil && m.SymbolsTried
	b.byMapping[m] = pm
	return pm
}

func (b *pprofBuilder) mappingByValue(m *stacks.Mapping) *pprofMapping {
	var k mappingKey
	switch {
	case m == nil || m.Kind == stacks.Unknown:
		k = mappingKey{kind: stacks.Unknown, file: stacks.UnknownFile}
	case m.Kind == stacks.Kernel:
		k = mappingKey{kind: stacks.Kernel, file: stacks.KernelFile}
	default:
		k = mappingKey{m.Kind, m.Start, m.Limit, m.Offset, m.File, m.BuildID}
	}
	if pm, ok := b.mappings[k]; ok {
		return pm
	}
	pm := &pprofMapping{
		m: &profile.Mapping{Start: k.start, Limit: k.limit, Offset: k.offset,
			File: cleanName(k.file), BuildID: cleanName(k.buildID)},
		kind: k.kind,
		lo:   math.MaxUint64,
	}
	if m != nil && k.kind == stacks.Kernel && m.Limit > m.Start {
		// Keep the kernel's own bounds; finish widens them to any module
		// address outside.
		pm.lo, pm.hi = m.Start, m.Limit-1
	}
	b.mappings[k] = pm
	b.order = append(b.order, pm)
	return pm
}

func (b *pprofBuilder) location(part locPart) *profile.Location {
	if l, ok := b.byLocation[part]; ok {
		return l
	}
	l := b.locationByValue(part)
	b.byLocation[part] = l
	return l
}

// locationByValue is the pprof Location of part; a part that is not its
// whole Location is a Location of its own at the same address.
func (b *pprofBuilder) locationByValue(part locPart) *profile.Location {
	loc := part.loc
	pm := b.mapping(loc.Mapping)
	k := locationKey{pm, loc.Address, part.lo, part.hi}
	if l, ok := b.locations[k]; ok {
		return l
	}
	l := &profile.Location{ID: uint64(len(b.out.Location) + 1), Mapping: pm.m, Address: loc.Address}
	b.locations[k] = l
	b.out.Location = append(b.out.Location, l)
	pm.lo, pm.hi = min(pm.lo, loc.Address), max(pm.hi, loc.Address)

	if !loc.Symbolized() {
		l.Line = []profile.Line{{Function: b.function(loc.Placeholder(), "", "")}}
		return l
	}
	pm.symbolized = true
	pm.m.HasInlineFrames = pm.m.HasInlineFrames || len(loc.Frames) > 1
	l.Line = make([]profile.Line, 0, part.hi-part.lo)
	for i := part.lo; i < part.hi; i++ {
		f := &loc.Frames[i]
		l.Line = append(l.Line, profile.Line{Function: b.function(functionName(loc, i), f.SystemName, f.File), Line: int64(f.Line)})
		pm.m.HasFilenames = pm.m.HasFilenames || f.File != ""
		pm.m.HasLineNumbers = pm.m.HasLineNumbers || f.Line > 0
	}
	return l
}

// syntheticLocation is the location of a frame sprof adds — the
// `[truncated]` marker, a process root — one per name, on the [unknown]
// mapping with no address.
func (b *pprofBuilder) syntheticLocation(name string) *profile.Location {
	l, ok := b.synthetic[name]
	if !ok {
		l = &profile.Location{
			ID:      uint64(len(b.out.Location) + 1),
			Mapping: b.mapping(nil).m,
			Line:    []profile.Line{{Function: b.function(name, "", "")}},
		}
		b.out.Location = append(b.out.Location, l)
		b.synthetic[name] = l
	}
	return l
}

func (b *pprofBuilder) function(name, systemName, file string) *profile.Function {
	if systemName == "" {
		systemName = name
	}
	k := functionKey{name, systemName, file}
	if f, ok := b.functions[k]; ok {
		return f
	}
	f := &profile.Function{ID: uint64(len(b.out.Function) + 1),
		Name: cleanName(name), SystemName: cleanName(systemName), Filename: cleanName(file)}
	b.functions[k] = f
	b.out.Function = append(b.out.Function, f)
	return f
}

// finish settles what depends on all samples: HasFunctions, the bounds of
// the synthetic mappings, and the mapping order, main first.
func (b *pprofBuilder) finish(main *pprofMapping) {
	for _, pm := range b.order {
		pm.m.HasFunctions = pm.symbolized
		if pm.kind != stacks.User && pm.lo <= pm.hi {
			pm.m.Start = pm.lo
			pm.m.Limit = pm.hi + 1
			if pm.hi == math.MaxUint64 {
				pm.m.Limit = pm.hi
			}
		}
	}
	rank := func(pm *pprofMapping) int {
		if pm == main {
			return -1
		}
		return mappingRank(pm.kind)
	}
	slices.SortStableFunc(b.order, func(x, y *pprofMapping) int { return rank(x) - rank(y) })
	for i, pm := range b.order {
		pm.m.ID = uint64(i + 1)
		b.out.Mapping = append(b.out.Mapping, pm.m)
	}
}

// cleanName makes a name safe for every consumer: invalid UTF-8 (a comm
// or a symbol is whatever bytes a program chose) becomes U+FFFD, and line
// breaks and other control characters become spaces, since they break
// pprof's text reports and line-based formats.
func cleanName(s string) string {
	clean := utf8.ValidString(s)
	for i := 0; clean && i < len(s); i++ {
		clean = s[i] >= ' ' && s[i] != 0x7f
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if r < ' ' || r == 0x7f {
			r = ' '
		}
		b.WriteRune(r)
	}
	return b.String()
}

// maxMainCandidates bounds the processes mainMapping looks at, busiest
// first, for one with user-space samples, and maxMainSamples the samples
// of each it looks at: a few thousand tell where a process runs as well
// as a million, at a thousandth of the cost.
const (
	maxMainCandidates = 8
	maxMainSamples    = 4096
)

// mainMapping returns the mapping of the executable of the process with
// the most samples, nil if it finds none. Which file a process runs is not
// in the samples, so it is the one of the process's mappings that its
// samples pass through most, preferring a file to a shared library
// (libc.so.6, libjvm.so) and either to what pprof cannot open (memfd JIT
// code, anonymous memory, [vdso]). Processes with kernel stacks only are
// passed over for the next busiest.
func (b *pprofBuilder) mainMapping(samples []*stacks.Sample) *pprofMapping {
	pids := make([]uint32, 0, len(b.pidSamples))
	for pid := range b.pidSamples {
		pids = append(pids, pid)
	}
	slices.SortFunc(pids, func(x, y uint32) int {
		if c := cmp.Compare(b.pidSamples[y], b.pidSamples[x]); c != 0 {
			return c
		}
		return cmp.Compare(x, y)
	})
	for _, pid := range pids[:min(len(pids), maxMainCandidates)] {
		through := map[*pprofMapping]int64{}
		var seen []*stacks.Mapping // the mappings of one sample: a few
		looked := 0
		for _, s := range samples {
			if s.Pid != pid || b.weight(s) <= 0 {
				continue
			}
			if looked++; looked > maxMainSamples {
				break
			}
			seen = seen[:0]
			for _, loc := range s.Stack {
				if m := loc.Mapping; m != nil && m.Kind == stacks.User && !slices.Contains(seen, m) {
					seen = append(seen, m)
					through[b.byMapping[m]] += b.weight(s)
				}
			}
		}
		var best *pprofMapping
		for _, pm := range b.order { // in first-seen order, for ties
			if _, ok := through[pm]; !ok {
				continue
			}
			if best == nil || executableRank(pm.m.File) < executableRank(best.m.File) ||
				executableRank(pm.m.File) == executableRank(best.m.File) && through[pm] > through[best] {
				best = pm
			}
		}
		if best != nil {
			return best
		}
	}
	return nil
}

// executableRank says how likely a mapped file is a process's executable:
// 0 for a file, 1 for a shared library, 2 for what pprof cannot open.
func executableRank(file string) int {
	base := filepath.Base(file)
	switch {
	case file == "" || file[0] == '[' || strings.HasPrefix(file, "/memfd:") || strings.HasPrefix(file, "//anon") ||
		strings.HasPrefix(file, "/dev/") || strings.HasPrefix(base, "linux-vdso"):
		return 2
	case strings.HasSuffix(base, ".so") || strings.Contains(base, ".so."):
		return 1
	}
	return 0
}

func mappingRank(k stacks.MappingKind) int {
	switch k {
	case stacks.User:
		return 0
	case stacks.Kernel:
		return 1
	}
	return 2
}
