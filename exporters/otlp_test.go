package exporters

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	profilespb "go.opentelemetry.io/proto/otlp/profiles/v1development"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/sprof/sprof/stacks"
)

// decodeOTLP parses b with the official bindings and checks what the
// format requires of a dictionary: every table starts with its zero
// value, and every index points into its table.
func decodeOTLP(t *testing.T, b []byte) *profilespb.ProfilesData {
	t.Helper()
	var data profilespb.ProfilesData
	if err := proto.Unmarshal(b, &data); err != nil {
		t.Fatalf("the bindings cannot parse the output: %v", err)
	}
	d := data.Dictionary
	if d == nil {
		t.Fatal("no dictionary")
	}
	zero := []struct {
		name string
		msg  proto.Message
		n    int
	}{
		{"mapping", d.MappingTable[0], len(d.MappingTable)}, {"location", d.LocationTable[0], len(d.LocationTable)},
		{"function", d.FunctionTable[0], len(d.FunctionTable)}, {"link", d.LinkTable[0], len(d.LinkTable)},
		{"attribute", d.AttributeTable[0], len(d.AttributeTable)}, {"stack", d.StackTable[0], len(d.StackTable)},
	}
	for _, z := range zero {
		if proto.Size(z.msg) != 0 {
			t.Errorf("%s_table[0] is %v, want the zero value", z.name, z.msg)
		}
	}
	if d.StringTable[0] != "" {
		t.Errorf("string_table[0] = %q, want \"\"", d.StringTable[0])
	}
	in := func(what string, i int32, n int) {
		if i < 0 || int(i) >= n {
			t.Errorf("%s index %d outside its table of %d", what, i, n)
		}
	}
	for _, m := range d.MappingTable {
		in("mapping filename", m.FilenameStrindex, len(d.StringTable))
		for _, a := range m.AttributeIndices {
			in("mapping attribute", a, len(d.AttributeTable))
		}
	}
	for _, f := range d.FunctionTable {
		for _, s := range []int32{f.NameStrindex, f.SystemNameStrindex, f.FilenameStrindex} {
			in("function string", s, len(d.StringTable))
		}
	}
	for _, l := range d.LocationTable[1:] {
		in("location mapping", l.MappingIndex, len(d.MappingTable))
		if l.MappingIndex == 0 {
			t.Errorf("location %v has no mapping", l)
		}
		if len(l.Lines) == 0 {
			t.Errorf("location %#x has no lines: every frame should be named", l.Address)
		}
		for _, ln := range l.Lines {
			in("line function", ln.FunctionIndex, len(d.FunctionTable))
		}
	}
	for _, st := range d.StackTable {
		for _, l := range st.LocationIndices {
			in("stack location", l, len(d.LocationTable))
		}
	}
	for _, a := range d.AttributeTable {
		in("attribute key", a.KeyStrindex, len(d.StringTable))
	}
	for _, rp := range data.ResourceProfiles {
		for _, sp := range rp.ScopeProfiles {
			for _, p := range sp.Profiles {
				for _, s := range p.Samples {
					in("sample stack", s.StackIndex, len(d.StackTable))
					for _, a := range s.AttributeIndices {
						in("sample attribute", a, len(d.AttributeTable))
					}
					if len(s.Values) != 1 {
						t.Errorf("sample with %d values, want 1 (samples/count)", len(s.Values))
					}
				}
			}
		}
	}
	return &data
}

// attrString renders attributes as k=v pairs in their order.
func attrString(kvs []*commonpb.KeyValue) string {
	var parts []string
	for _, kv := range kvs {
		switch v := kv.Value.Value.(type) {
		case *commonpb.AnyValue_StringValue:
			parts = append(parts, kv.Key+"="+v.StringValue)
		case *commonpb.AnyValue_IntValue:
			parts = append(parts, fmt.Sprintf("%s=%d", kv.Key, v.IntValue))
		}
	}
	return strings.Join(parts, " ")
}

// sampleAttrs returns s's attributes as key-values.
func sampleAttrs(d *profilespb.ProfilesDictionary, s *profilespb.Sample) []*commonpb.KeyValue {
	var kvs []*commonpb.KeyValue
	for _, a := range s.AttributeIndices {
		kvs = append(kvs, &commonpb.KeyValue{Key: d.StringTable[d.AttributeTable[a].KeyStrindex], Value: d.AttributeTable[a].Value})
	}
	return kvs
}

// otlpFolded renders every sample of data as `pid;root;…;leaf count`
// lines, sorted, reading the dictionary as a consumer does: stacks leaf
// first, a location's lines innermost first.
func otlpFolded(data *profilespb.ProfilesData) []string { return otlpFoldedOf(data, "") }

// otlpFoldedOf is otlpFolded of the profiles of one sample type
// ("off_cpu/nanoseconds"), or of all with "".
func otlpFoldedOf(data *profilespb.ProfilesData, sampleType string) []string {
	d := data.Dictionary
	var out []string
	for _, rp := range data.ResourceProfiles {
		for _, sp := range rp.ScopeProfiles {
			for _, p := range sp.Profiles {
				if sampleType != "" && sampleType != d.StringTable[p.SampleType.TypeStrindex]+"/"+d.StringTable[p.SampleType.UnitStrindex] {
					continue
				}
				for _, s := range p.Samples {
					pid := ""
					for _, kv := range sampleAttrs(d, s) {
						if kv.Key == attrProcessPid {
							pid = fmt.Sprint(kv.Value.GetIntValue())
						}
					}
					var names []string
					locs := d.StackTable[s.StackIndex].LocationIndices
					for i := len(locs) - 1; i >= 0; i-- {
						lines := d.LocationTable[locs[i]].Lines
						for j := len(lines) - 1; j >= 0; j-- {
							name := d.StringTable[d.FunctionTable[lines[j].FunctionIndex].NameStrindex]
							names = append(names, strings.ReplaceAll(name, ";", ":"))
						}
					}
					out = append(out, fmt.Sprintf("%s;%s %d", pid, strings.Join(names, ";"), s.Values[0]))
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

func TestOTLPFixture(t *testing.T) {
	var buf bytes.Buffer
	opt := Options{OTLP: OTLPOptions{HostName: "node-1", ScopeVersion: "1.2.3",
		Service: func(s *stacks.Sample) string { return "svc-" + s.Comm }}}
	if err := WriteOTLP(&buf, fixture(), opt); err != nil {
		t.Fatal(err)
	}
	data := decodeOTLP(t, buf.Bytes())

	var resources []string
	for _, rp := range data.ResourceProfiles {
		resources = append(resources, attrString(rp.Resource.Attributes))
		if len(rp.ScopeProfiles) != 1 || rp.ScopeProfiles[0].Scope.Name != "sprof" || rp.ScopeProfiles[0].Scope.Version != "1.2.3" {
			t.Errorf("scope %v", rp.ScopeProfiles)
		}
	}
	want := []string{
		"service.name=svc-app host.name=node-1 container.id=" + fixtureContainer,
		"service.name=svc-kworker/0:1 x host.name=node-1",
	}
	if !slices.Equal(resources, want) {
		t.Errorf("resources\n%q\nwant\n%q", resources, want)
	}

	d := data.Dictionary
	p := data.ResourceProfiles[0].ScopeProfiles[0].Profiles[0]
	str := func(i int32) string { return d.StringTable[i] }
	if str(p.SampleType.TypeStrindex) != "samples" || str(p.SampleType.UnitStrindex) != "count" ||
		str(p.PeriodType.TypeStrindex) != "cpu" || str(p.PeriodType.UnitStrindex) != "nanoseconds" ||
		p.Period != int64(time.Second/99) || p.TimeUnixNano != uint64(fixture().Start.UnixNano()) || p.DurationNano != 10e9 || len(p.ProfileId) != 16 {
		t.Errorf("profile header: %v", p)
	}
	// Process and thread attributes.
	threads := map[string]int64{}
	for _, s := range p.Samples {
		threads[attrString(sampleAttrs(d, s))] += s.Values[0]
	}
	proc := "process.pid=42 process.executable.name=app process.executable.path=/usr/bin/app "
	if len(threads) != 2 || threads[proc+"thread.id=42 thread.name=app"] != 35 || threads[proc+"thread.id=43 thread.name=app"] != 12 {
		t.Errorf("samples per thread %v", threads)
	}
	// Mappings carry build IDs; the inline location has its three lines,
	// innermost first, with files and line numbers.
	builds := map[string]string{}
	for _, m := range d.MappingTable[1:] {
		for _, a := range m.AttributeIndices {
			if str(d.AttributeTable[a].KeyStrindex) == attrBuildIDGNU {
				builds[str(m.FilenameStrindex)] = d.AttributeTable[a].Value.GetStringValue()
			}
		}
	}
	if builds["/usr/bin/app"] != "0123456789abcdef0123456789abcdef01234567" || builds["/usr/lib/x86_64-linux-gnu/libc.so.6"] != "fedcba9876543210fedcba9876543210fedcba98" {
		t.Errorf("build IDs %v", builds)
	}
	var inline []string
	for _, l := range d.LocationTable[1:] {
		if l.Address == 0x401234 {
			for _, ln := range l.Lines {
				f := d.FunctionTable[ln.FunctionIndex]
				inline = append(inline, fmt.Sprintf("%s %s:%d", str(f.NameStrindex), str(f.FilenameStrindex), ln.Line))
			}
		}
	}
	if want := []string{"hash hash.h:7", "mix;step next work.c:12", "work(int) work.c:22"}; !slices.Equal(inline, want) {
		t.Errorf("inline location lines %q, want %q", inline, want)
	}

	// The same stacks as every other format shows.
	var folded bytes.Buffer
	if err := WriteFolded(&folded, fixture(), Options{ProcessRoot: CommPidRoot}); err != nil {
		t.Fatal(err)
	}
	var wantFolded []string
	unmark := strings.NewReplacer("_[k]", "", "_[i]", "") // folded's kernel and inline marks
	for _, line := range strings.Split(strings.TrimSpace(unmark.Replace(folded.String())), "\n") {
		// comm-pid root frame → pid; thread rows merge in folded output.
		root, rest, _ := strings.Cut(line, ";")
		wantFolded = append(wantFolded, root[strings.LastIndexByte(root, '-')+1:]+";"+rest)
	}
	slices.Sort(wantFolded)
	got := mergeFolded(otlpFolded(data))
	if !slices.Equal(got, wantFolded) {
		t.Errorf("OTLP stacks\n%s\nfolded\n%s", strings.Join(got, "\n"), strings.Join(wantFolded, "\n"))
	}
}

// mergeFolded adds up the counts of equal stacks.
func mergeFolded(lines []string) []string {
	counts := map[string]int64{}
	for _, l := range lines {
		i := strings.LastIndexByte(l, ' ')
		var n int64
		fmt.Sscan(l[i+1:], &n)
		counts[l[:i]] += n
	}
	var out []string
	for k, n := range counts {
		out = append(out, fmt.Sprintf("%s %d", k, n))
	}
	slices.Sort(out)
	return out
}

func TestOTLPJSONRoundTrip(t *testing.T) {
	var bin, js bytes.Buffer
	if err := WriteOTLP(&bin, fixture(), Options{}); err != nil {
		t.Fatal(err)
	}
	if err := WriteOTLPJSON(&js, fixture(), Options{}); err != nil {
		t.Fatal(err)
	}
	var fromJSON profilespb.ProfilesData
	if err := protojson.Unmarshal(js.Bytes(), &fromJSON); err != nil {
		t.Fatalf("the bindings cannot parse the JSON: %v", err)
	}
	fromBin := decodeOTLP(t, bin.Bytes())
	if a, b := otlpFolded(fromBin), otlpFolded(&fromJSON); !slices.Equal(a, b) {
		t.Errorf("JSON and protobuf differ:\n%q\n%q", a, b)
	}
	if !strings.Contains(js.String(), `"resourceProfiles"`) || !strings.Contains(js.String(), `"stringTable"`) {
		t.Errorf("JSON does not use the lowerCamelCase field names OTLP/JSON requires:\n%.300s", js.String())
	}
}

// TestOTLPSplitsBigProcesses: a process with more distinct samples than
// Pyroscope takes in one profile goes out as several Profiles.
func TestOTLPSplitsBigProcesses(t *testing.T) {
	exe := &stacks.Mapping{Kind: stacks.User, Start: 0x400000, Limit: 0x40000000, File: "/usr/bin/wide"}
	p := &stacks.Profile{Duration: 1e9, Period: 1e7, Mappings: []*stacks.Mapping{exe}}
	for i := range maxOTLPSamples + 10 {
		loc := &stacks.Location{Mapping: exe, Address: 0x400000 + uint64(i), Frames: []stacks.Frame{{Function: fmt.Sprint("f", i)}}}
		p.Samples = append(p.Samples, &stacks.Sample{Stack: []*stacks.Location{loc}, Count: 1, Pid: 1, Tid: 1, Comm: "wide"})
	}
	data, err := BuildOTLP(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	profiles := data.ResourceProfiles[0].ScopeProfiles[0].Profiles
	if len(profiles) != 2 || len(profiles[0].Samples)+len(profiles[1].Samples) != maxOTLPSamples+10 {
		t.Errorf("%d profiles", len(profiles))
	}
}

func BenchmarkOTLP(b *testing.B) {
	p := fixture()
	var size int
	b.ReportAllocs()
	for b.Loop() {
		var buf bytes.Buffer
		if err := WriteOTLP(&buf, p, Options{}); err != nil {
			b.Fatal(err)
		}
		size = buf.Len()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(p.Samples)), "ns/sample")
	b.ReportMetric(float64(size), "bytes")
}

// TestOTLPOneResourcePerService: two processes of one service (forked
// workers) are one resource, told apart by their samples' process.pid.
func TestOTLPOneResourcePerService(t *testing.T) {
	exe := &stacks.Mapping{Kind: stacks.User, Start: 0x400000, Limit: 0x500000, File: "/usr/sbin/postgres"}
	loc := &stacks.Location{Mapping: exe, Address: 0x401000, Frames: []stacks.Frame{{Function: "exec_simple_query"}}}
	p := &stacks.Profile{Duration: 1e9, Period: 1e7, Mappings: []*stacks.Mapping{exe}, Samples: []*stacks.Sample{
		{Stack: []*stacks.Location{loc}, Count: 2, Pid: 10, Tid: 10, Comm: "postgres"},
		{Stack: []*stacks.Location{loc}, Count: 3, Pid: 11, Tid: 11, Comm: "postgres"},
	}}
	data, err := BuildOTLP(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(data.ResourceProfiles) != 1 || attrString(data.ResourceProfiles[0].Resource.Attributes) != "service.name=postgres" {
		t.Fatalf("resources %v", data.ResourceProfiles)
	}
	if got := otlpFolded(data); !slices.Equal(got, []string{"10;exec_simple_query 2", "11;exec_simple_query 3"}) {
		t.Errorf("samples %q", got)
	}
	// Without sample attributes (a series per resource in Pyroscope), the
	// samples stay apart and carry nothing but their stack and value.
	data, err = BuildOTLP(p, Options{OTLP: OTLPOptions{NoSampleAttributes: true}})
	if err != nil {
		t.Fatal(err)
	}
	var counts []int64
	for _, s := range data.ResourceProfiles[0].ScopeProfiles[0].Profiles[0].Samples {
		if len(s.AttributeIndices) > 0 {
			t.Errorf("a sample with attributes %v", s.AttributeIndices)
		}
		counts = append(counts, s.Values...)
	}
	if !slices.Equal(counts, []int64{2, 3}) {
		t.Errorf("sample values %v, want [2 3]", counts)
	}
}
