package exporters

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sprof/sprof/stacks"
)

// offCPUFixture is the fixture with off-CPU time: the work stack waited
// 2 s in thread 42, the write stack 500 ms, and a stack no CPU sample has
// (a futex wait) 1.25 s. With cpu false it has no CPU samples at all.
func offCPUFixture(cpu bool) *stacks.Profile {
	p := fixture()
	p.OffCPU = true
	p.Samples[0].OffCPU = 2 * time.Second
	p.Samples[2].OffCPU = 500 * time.Millisecond
	futex := &stacks.Location{Mapping: p.Mappings[2], Address: 0xffffffff81002000,
		Frames: []stacks.Frame{{Function: "futex_wait"}}}
	p.Samples = append(p.Samples, &stacks.Sample{Stack: []*stacks.Location{futex, p.Samples[0].Stack[1]},
		OffCPU: 1250 * time.Millisecond, Pid: 42, Tid: 43, Comm: "app", Container: fixtureContainer})
	if !cpu {
		p.Period = 0
		for _, s := range p.Samples {
			s.Count = 0
		}
	}
	return p
}

func writePprofFile(t *testing.T, p *stacks.Profile) string {
	t.Helper()
	var buf bytes.Buffer
	if err := WritePprof(&buf, p, Options{}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "profile.pb.gz")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPprofOffCPU reads the profiles back with `go tool pprof`: beside CPU
// samples, off_cpu is a second sample type that -sample_index selects and
// cpu stays the default; alone, it is the only one.
func TestPprofOffCPU(t *testing.T) {
	both := writePprofFile(t, offCPUFixture(true))
	for _, tc := range []struct {
		path string
		args []string
		want []string
	}{
		{both, nil, []string{"Type: cpu", "Total samples = 484.85ms"}},
		{both, []string{"-sample_index=off_cpu"}, []string{"Type: off_cpu", "Total samples = 3750ms",
			`(?m)^\s+2000ms\s+53\.33%.*hash \(inline\)$`, `(?m)^\s+1250ms\s+33\.33%.*futex_wait$`}},
		{writePprofFile(t, offCPUFixture(false)), nil, []string{"Type: off_cpu", "Total samples = 3750ms",
			`(?m)^\s+500ms\s+13\.33%.*\[kernel\] 0xffffffffc0001234$`}},
	} {
		top := string(goTool(t, append(append([]string{"pprof", "-top", "-symbolize=none"}, tc.args...), tc.path)...))
		for _, want := range tc.want {
			if !matches(want, top) {
				t.Errorf("go tool pprof -top %v lacks %q:\n%s", tc.args, want, top)
			}
		}
	}
	raw := string(goTool(t, "pprof", "-raw", "-symbolize=none", both))
	if !strings.Contains(raw, "samples/count cpu/nanoseconds[dflt] off_cpu/nanoseconds\n") {
		t.Errorf("sample types of the profile with both:\n%s", raw)
	}
}

// TestOneValueFormatsOffCPU: with Options.OffCPU, folded stacks count
// microseconds off the CPU, and speedscope weighs in nanoseconds.
func TestOneValueFormatsOffCPU(t *testing.T) {
	p := offCPUFixture(true)
	var folded bytes.Buffer
	if err := WriteFolded(&folded, p, Options{OffCPU: true}); err != nil {
		t.Fatal(err)
	}
	checkFoldedSyntax(t, folded.String())
	for _, want := range []string{"main;futex_wait_[k] 1250000\n", "main;work(int);mix:step next_[i];hash_[i] 2000000\n"} {
		if !strings.Contains(folded.String(), want) {
			t.Errorf("folded lacks %q:\n%s", want, folded.String())
		}
	}
	if strings.Count(folded.String(), "\n") != 3 {
		t.Errorf("folded has stacks without off-CPU time:\n%s", folded.String())
	}
	var ss bytes.Buffer
	if err := WriteSpeedscope(&ss, p, Options{OffCPU: true}); err != nil {
		t.Fatal(err)
	}
	var file speedscopeFile
	if err := json.Unmarshal(ss.Bytes(), &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Profiles) != 1 || file.Profiles[0].EndValue != int64(3750*time.Millisecond) || !strings.Contains(file.Name, "3.75s off the CPU") {
		t.Errorf("speedscope: %q, %d profiles, first ends at %d", file.Name, len(file.Profiles), file.Profiles[0].EndValue)
	}
	var svg bytes.Buffer
	if err := WriteFlameGraph(&svg, p, Options{OffCPU: true}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(svg.String(), "3.75s off the CPU") {
		t.Errorf("SVG subtitle does not say the time off the CPU")
	}
}

// matches is true when out contains want or want, as a regular
// expression, matches in out.
func matches(want, out string) bool {
	return strings.Contains(out, want) || regexp.MustCompile(want).MatchString(out)
}

// TestOTLPOffCPU decodes the OTLP output of profiles with off-CPU time
// with the official bindings: beside each resource's CPU profile, an
// off_cpu/nanoseconds profile holds the waits, every nanosecond of them
// (period 1), with the stacks and values folded output shows; alone, it
// is the only profile. The CPU profiles are those of the profile without
// off-CPU time.
func TestOTLPOffCPU(t *testing.T) {
	opt := Options{OTLP: OTLPOptions{Service: func(s *stacks.Sample) string { return "svc-" + s.Comm }}}
	var plain bytes.Buffer
	if err := WriteOTLP(&plain, fixture(), opt); err != nil {
		t.Fatal(err)
	}
	wantCPU := otlpFolded(decodeOTLP(t, plain.Bytes()))
	for _, cpu := range []bool{true, false} {
		p := offCPUFixture(cpu)
		var buf bytes.Buffer
		if err := WriteOTLP(&buf, p, opt); err != nil {
			t.Fatal(err)
		}
		data := decodeOTLP(t, buf.Bytes())
		d := data.Dictionary
		str := func(i int32) string { return d.StringTable[i] }
		types := map[string]int{}
		var services []string
		for _, rp := range data.ResourceProfiles {
			services = append(services, attrString(rp.Resource.Attributes))
			for _, prof := range rp.ScopeProfiles[0].Profiles {
				typ := str(prof.SampleType.TypeStrindex) + "/" + str(prof.SampleType.UnitStrindex)
				types[typ]++
				if typ == "off_cpu/nanoseconds" && (str(prof.PeriodType.TypeStrindex) != "off_cpu" ||
					str(prof.PeriodType.UnitStrindex) != "nanoseconds" || prof.Period != 1) {
					t.Errorf("cpu %v: off-CPU profile's period %v %d", cpu, prof.PeriodType, prof.Period)
				}
			}
		}
		// The kernel worker has CPU samples only.
		wantTypes := map[string]int{"samples/count": 2, "off_cpu/nanoseconds": 1}
		wantServices := []string{"service.name=svc-app container.id=" + fixtureContainer, "service.name=svc-kworker/0:1 x"}
		if !cpu {
			wantTypes = map[string]int{"off_cpu/nanoseconds": 1}
			wantServices = wantServices[:1]
		}
		if !maps.Equal(types, wantTypes) || !slices.Equal(services, wantServices) {
			t.Errorf("cpu %v: profiles by sample type %v, resources %q; want %v, %q", cpu, types, services, wantTypes, wantServices)
		}
		if got := otlpFoldedOf(data, "samples/count"); cpu && !slices.Equal(got, wantCPU) {
			t.Errorf("CPU profiles beside off-CPU time\n%s\nwithout\n%s", strings.Join(got, "\n"), strings.Join(wantCPU, "\n"))
		}

		// Folded output counts microseconds off the CPU; pid as root.
		var folded bytes.Buffer
		if err := WriteFolded(&folded, p, Options{OffCPU: true, ProcessRoot: CommPidRoot}); err != nil {
			t.Fatal(err)
		}
		var want []string
		unmark := strings.NewReplacer("_[k]", "", "_[i]", "")
		for _, line := range strings.Split(strings.TrimSpace(unmark.Replace(folded.String())), "\n") {
			root, rest, _ := strings.Cut(line, ";")
			stack, us, _ := strings.Cut(rest, " ")
			want = append(want, root[strings.LastIndexByte(root, '-')+1:]+";"+stack+" "+us+"000")
		}
		slices.Sort(want)
		got := mergeFolded(otlpFoldedOf(data, "off_cpu/nanoseconds"))
		if !slices.Equal(got, want) {
			t.Errorf("cpu %v: off-CPU profile\n%s\nfolded\n%s", cpu, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		var total int64
		for _, line := range got {
			var n int64
			fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &n)
			total += n
		}
		if total != (3750 * time.Millisecond).Nanoseconds() {
			t.Errorf("cpu %v: %d ns off the CPU in all, want 3.75 s", cpu, total)
		}
	}
}
