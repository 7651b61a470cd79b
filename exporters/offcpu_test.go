package exporters

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
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
