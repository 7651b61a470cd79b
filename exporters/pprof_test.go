package exporters

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/sprof/sprof/stacks"
)

// writeFixturePprof writes the fixture as pprof to a temporary file and
// returns its path and the profile the pprof library decodes from it.
func writeFixturePprof(t *testing.T, opt Options) (string, *profile.Profile) {
	t.Helper()
	var buf bytes.Buffer
	if err := WritePprof(&buf, fixture(), opt); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(buf.Bytes(), []byte{0x1f, 0x8b}) {
		t.Fatalf("output is not gzip-compressed: % x", buf.Bytes()[:min(4, buf.Len())])
	}
	path := filepath.Join(t.TempDir(), "cpu.pb.gz")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(&buf)
	if err != nil {
		t.Fatalf("parse our own output: %v", err)
	}
	if err := CheckPprof(p); err != nil {
		t.Fatalf("decoded profile fails CheckPprof: %v", err)
	}
	return path, p
}

// TestPprofRaw keeps `go tool pprof -raw` of the fixture as a golden file:
// the whole model as an independent reader sees it, with the [FN][FL][LN][IN]
// flags of each mapping.
func TestPprofRaw(t *testing.T) {
	path, _ := writeFixturePprof(t, Options{})
	raw := goTool(t, "pprof", "-raw", "-symbolize=none", path)
	checkGolden(t, "fixture.pprof.raw", raw)
}

func TestPprofTop(t *testing.T) {
	path, _ := writeFixturePprof(t, Options{})
	top := string(goTool(t, "pprof", "-top", "-symbolize=none", path))
	for _, want := range []string{
		"Type: cpu",
		"Duration: 10s, Total samples = 484.85ms", // 48 samples × 10.1ms
		"lost samples: 3",
		// flat cpu of the inlined leaf: 40 samples
		`(?m)^\s+404\.04ms\s+83\.33%\s+83\.33%\s+404\.04ms\s+83\.33%\s+hash \(inline\)$`,
		`(?m)\s+mix;step next \(inline\)$`,
		`(?m)\s+work\(int\)$`,
		// an address without a symbol keeps its own frame
		`(?m)\s+70\.71ms\s+14\.58%\s+libc\.so\.6\+0x3a345$`,
		`(?m)\s+\[kernel\] 0xffffffffc0001234$`,
		`(?m)\s+\[truncated\]$`,
		`(?m)\s+ksys_write$`,
	} {
		if !regexp.MustCompile(want).MatchString(top) && !strings.Contains(top, want) {
			t.Errorf("go tool pprof -top lacks %q:\n%s", want, top)
		}
	}
	tags := string(goTool(t, "pprof", "-tags", "-symbolize=none", path))
	for _, want := range []string{"comm: Total 484.85ms", "474.75ms (97.92%): app", "121.21ms (25.00%): 43", "10.10ms ( 2.08%): 7"} {
		if !strings.Contains(tags, want) {
			t.Errorf("go tool pprof -tags lacks %q:\n%s", want, tags)
		}
	}
}

func TestPprofShape(t *testing.T) {
	_, p := writeFixturePprof(t, Options{})
	if got := len(p.Sample); got != 5 {
		t.Errorf("%d samples, want 5 (the zero-count one dropped, none merged)", got)
	}
	if p.Period != 10101010 || p.TimeNanos != fixture().Start.UnixNano() || p.DurationNanos != 10e9 {
		t.Errorf("period %d time %d duration %d", p.Period, p.TimeNanos, p.DurationNanos)
	}
	if len(p.Comments) != 1 || p.Comments[0] != "lost samples: 3" {
		t.Errorf("comments %q", p.Comments)
	}
	type flags struct{ fn, fl, ln, in bool }
	want := map[string]flags{
		"/usr/bin/app":                        {true, true, true, true},
		"/usr/lib/x86_64-linux-gnu/libc.so.6": {},
		stacks.KernelFile:                     {fn: true},
		stacks.UnknownFile:                    {},
	}
	if len(p.Mapping) != len(want) {
		t.Errorf("%d mappings, want %d", len(p.Mapping), len(want))
	}
	for _, m := range p.Mapping {
		if got := (flags{m.HasFunctions, m.HasFilenames, m.HasLineNumbers, m.HasInlineFrames}); got != want[m.File] {
			t.Errorf("mapping %s: flags %+v, want %+v", m.File, got, want[m.File])
		}
	}
	if p.Mapping[0].File != "/usr/bin/app" || p.Mapping[0].BuildID != "0123456789abcdef0123456789abcdef01234567" || p.Mapping[0].Offset != 0x1000 {
		t.Errorf("first mapping %+v", p.Mapping[0])
	}
	for _, l := range p.Location {
		if l.Address == 0x401234 {
			var names []string
			for _, ln := range l.Line {
				names = append(names, ln.Function.Name)
			}
			if got := strings.Join(names, "|"); got != "hash|mix;step next|work(int)" {
				t.Errorf("inline lines %q, want innermost first", got)
			}
			if l.Line[2].Function.SystemName != "_Z4worki" {
				t.Errorf("system name %q", l.Line[2].Function.SystemName)
			}
		}
		if l.Mapping.File == "/usr/lib/x86_64-linux-gnu/libc.so.6" &&
			(len(l.Line) != 1 || l.Line[0].Function.Name != "libc.so.6+0x3a345" || l.Address != 0x7f0000012345) {
			t.Errorf("unsymbolized libc location %+v: want its address and its placeholder", l)
		}
	}
	for _, s := range p.Sample {
		if s.Label["comm"] == nil || s.NumLabel["pid"] == nil || s.NumLabel["tid"] == nil || s.Label["pid"] != nil || s.Label["tid"] != nil {
			t.Errorf("sample labels %v %v: want comm a string, pid and tid numbers", s.Label, s.NumLabel)
		}
	}
}

func TestPprofLabelsMergeSamples(t *testing.T) {
	_, p := writeFixturePprof(t, Options{Labels: []Label{LabelPid}})
	if got := len(p.Sample); got != 4 {
		t.Errorf("%d samples, want 4: the two threads' equal stacks merge without a tid label", got)
	}
	for _, s := range p.Sample {
		if len(s.Label) != 0 || len(s.NumLabel) != 1 || s.NumLabel["pid"] == nil {
			t.Errorf("labels %v %v, want only pid", s.Label, s.NumLabel)
		}
		if s.Value[1] != s.Value[0]*p.Period {
			t.Errorf("values %v: want [n, n*period]", s.Value)
		}
	}
	_, p = writeFixturePprof(t, Options{Labels: []Label{}})
	for _, s := range p.Sample {
		if len(s.Label) != 0 || len(s.NumLabel) != 0 {
			t.Errorf("labels %v %v, want none", s.Label, s.NumLabel)
		}
	}
}

func TestPprofEdgeCases(t *testing.T) {
	kern := &stacks.Mapping{Kind: stacks.Kernel, File: stacks.KernelFile}
	lib := &stacks.Mapping{Kind: stacks.User, Start: 0x1000, Limit: 0x2000, File: "/lib/libx.so"}
	for _, tc := range []struct {
		name    string
		samples []*stacks.Sample
		wantErr string
	}{
		{name: "empty profile"},
		{name: "kernel only", samples: []*stacks.Sample{{Stack: []*stacks.Location{
			{Mapping: kern, Address: 0xffffffff81000000, Frames: []stacks.Frame{{Function: "f"}}}}, Count: 1}}},
		{name: "nil mapping", samples: []*stacks.Sample{{Stack: []*stacks.Location{{Address: 0x10}}, Count: 1}}},
		{name: "address zero", samples: []*stacks.Sample{{Stack: []*stacks.Location{{Address: 0}}, Count: 1}}},
		{name: "invalid UTF-8", samples: []*stacks.Sample{{Stack: []*stacks.Location{
			{Mapping: lib, Address: 0x1000, Frames: []stacks.Frame{{Function: "f\xff"}}}}, Count: 1, Comm: "a\xfe"}}},
		{name: "address outside its mapping", samples: []*stacks.Sample{{Stack: []*stacks.Location{
			{Mapping: lib, Address: 0x3000}}, Count: 1}}, wantErr: "outside mapping"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &stacks.Profile{Period: 10_000_000, Samples: tc.samples}
			var buf bytes.Buffer
			err := WritePprof(&buf, p, Options{})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := profile.Parse(&buf)
			if err != nil {
				t.Fatal(err)
			}
			if err := CheckPprof(got); err != nil {
				t.Error(err)
			}
		})
	}
	if err := WritePprof(&bytes.Buffer{}, &stacks.Profile{}, Options{}); err == nil {
		t.Error("a profile without a period was accepted")
	}
}

// TestCheckPprofRejects feeds CheckPprof the mistakes it exists to catch.
func TestCheckPprofRejects(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(p *profile.Profile)
		want  string
	}{
		{"sparse mapping IDs", func(p *profile.Profile) { p.Mapping[0].ID = 99 }, "dense"},
		{"sparse function IDs", func(p *profile.Profile) { p.Function[0].ID = 99 }, "dense"},
		{"sparse location IDs", func(p *profile.Profile) { p.Location[0].ID = 99 }, "dense"},
		{"zero value", func(p *profile.Profile) { p.Sample[0].Value[1] = 0 }, "positive"},
		{"bad UTF-8", func(p *profile.Profile) { p.Function[0].Name = "\xff" }, "UTF-8"},
		{"two label values", func(p *profile.Profile) { p.Sample[0].Label = map[string][]string{"a": {"1", "2"}} }, "values"},
		{"two numeric label values", func(p *profile.Profile) { p.Sample[0].NumLabel = map[string][]int64{"pid": {1, 2}} }, "values"},
		{"pid string and number", func(p *profile.Profile) { p.Sample[0].Label = map[string][]string{"pid": {"42"}} }, "both a string and a number"},
		{"dash in type", func(p *profile.Profile) { p.SampleType[0].Type = "cpu-time" }, "'-'"},
		{"no period", func(p *profile.Profile) { p.Period = 0 }, "period"},
		{"address outside", func(p *profile.Profile) { p.Location[0].Address = 1 }, "outside"},
		{"foreign location", func(p *profile.Profile) {
			l := *p.Sample[0].Location[0]
			p.Sample[0].Location[0] = &l
		}, "not in the location table"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := BuildPprof(fixture(), Options{})
			if err != nil {
				t.Fatal(err)
			}
			tc.spoil(p)
			if err := CheckPprof(p); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestPprofMaxDepth(t *testing.T) {
	m := &stacks.Mapping{Kind: stacks.User, Start: 0x1000, Limit: 0x9000, File: "/bin/deep"}
	var stack []*stacks.Location // leaf first: f0 is the leaf, f9 the root
	for i := range 10 {
		stack = append(stack, &stacks.Location{Mapping: m, Address: 0x1000 + uint64(i),
			Frames: []stacks.Frame{{Function: "f" + string(rune('0'+i))}}})
	}
	p := &stacks.Profile{Period: 1e7, Samples: []*stacks.Sample{{Stack: stack, Count: 1}, {Stack: stack[6:], Count: 1}}}
	pp, err := BuildPprof(p, Options{MaxDepth: 4})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range pp.Sample[0].Location {
		got = append(got, l.Line[0].Function.Name)
	}
	if strings.Join(got, " ") != "[truncated] f7 f8 f9" {
		t.Errorf("capped stack %q, want the root-most frames under a [truncated] leaf", got)
	}
	if n := len(pp.Sample[1].Location); n != 4 {
		t.Errorf("a stack of exactly 4 got %d locations", n)
	}
}

func TestPprofProcessRoot(t *testing.T) {
	_, p := writeFixturePprof(t, Options{ProcessRoot: CommPidRoot, Labels: []Label{}})
	roots := map[string]int64{}
	for _, s := range p.Sample {
		root := s.Location[len(s.Location)-1]
		roots[root.Line[0].Function.Name] += s.Value[0]
		if s.Location[len(s.Location)-2].Line[0].Function.Name == TruncatedFrame && s.Value[0] != 2 {
			t.Errorf("[truncated] is not right under the process root")
		}
	}
	if len(roots) != 2 || roots["app-42"] != 47 || roots["kworker/0:1_x-7"] != 1 {
		t.Errorf("process roots %v, want app-42: 47 and kworker/0:1_x-7: 1", roots)
	}
}

// TestPprofTagFocusPid holds the numeric pid and tid labels to pprof
// itself: -tagfocus pid=42 keeps exactly pid 42's samples, a range works,
// and -tags counts each sample once (a label that is a string and a
// number would be counted twice).
func TestPprofTagFocusPid(t *testing.T) {
	path, p := writeFixturePprof(t, Options{})
	perPid, perTid := map[int64]int64{}, map[int64]int64{}
	for _, s := range p.Sample {
		perPid[s.NumLabel["pid"][0]] += s.Value[1]
		perTid[s.NumLabel["tid"][0]] += s.Value[1]
	}
	if len(perPid) < 2 || len(perTid) < 3 {
		t.Fatalf("the fixture has %d processes and %d threads; the test needs two and three", len(perPid), len(perTid))
	}
	// What -top shows with every node kept (-nodefraction=0) is what the
	// filter kept.
	total := regexp.MustCompile(`(?m)^Showing nodes accounting for ([\d.]+)ms, [\d.]+% of [\d.]+ms total$`)
	focused := func(filter string) string {
		top := string(goTool(t, "pprof", "-top", "-nodefraction=0", "-symbolize=none", "-tagfocus", filter, path))
		m := total.FindStringSubmatch(top)
		if m == nil {
			t.Fatalf("-tagfocus %s: no total in\n%s", filter, top)
		}
		return m[1]
	}
	ms := func(ns int64) string { return strconv.FormatFloat(float64(ns)/1e6, 'f', 2, 64) }
	for pid, ns := range perPid {
		if got := focused(fmt.Sprintf("pid=%d", pid)); got != ms(ns) {
			t.Errorf("-tagfocus pid=%d: %s ms, want %s", pid, got, ms(ns))
		}
	}
	for tid, ns := range perTid {
		if got := focused(fmt.Sprintf("tid=%d", tid)); got != ms(ns) {
			t.Errorf("-tagfocus tid=%d: %s ms, want %s", tid, got, ms(ns))
		}
	}
	if got, want := focused("pid=1:1000000"), ms(perPid[7]+perPid[42]); got != want {
		t.Errorf("-tagfocus pid=1:1000000: %s ms, want %s", got, want)
	}
	tags := string(goTool(t, "pprof", "-tags", "-symbolize=none", path))
	for _, key := range []string{"pid", "tid"} {
		if !regexp.MustCompile(`(?m)^\s*` + key + `: Total ([\d.]+ms) of ([\d.]+ms) \(  100%\)$`).MatchString(tags) {
			t.Errorf("go tool pprof -tags does not count %s once per sample:\n%s", key, tags)
		}
	}
}

// TestPprofContainer reads the container of the fixture's process with
// `go tool pprof -tags`, as a label only its samples carry, and checks
// that dropping the label from Options drops it from the profile.
func TestPprofContainer(t *testing.T) {
	path, _ := writeFixturePprof(t, Options{})
	tags := string(goTool(t, "pprof", "-tags", "-symbolize=none", path))
	// 47 of the 48 samples, 10.1 ms each: all but the kworker's.
	want := regexp.MustCompile(`(?m)^\s*container_id: Total 474\.75ms of 484\.85ms \(97\.92%\)\n\s*474\.75ms \(97\.92%\): ` + fixtureContainer + `$`)
	if !want.MatchString(tags) {
		t.Errorf("go tool pprof -tags does not show the container of pid 42:\n%s", tags)
	}
	_, p := writeFixturePprof(t, Options{Labels: []Label{LabelComm, LabelPid}})
	for _, s := range p.Sample {
		if _, ok := s.Label[string(LabelContainer)]; ok {
			t.Fatalf("a container_id label without asking for one: %v", s.Label)
		}
	}
}

// TestPprofContainerRoot puts the container's frame above the process's.
func TestPprofContainerRoot(t *testing.T) {
	_, p := writeFixturePprof(t, Options{ProcessRoot: ContainerCommRoot, Labels: []Label{}})
	roots := map[string]int64{}
	for _, s := range p.Sample {
		var names []string
		for _, l := range s.Location[max(len(s.Location)-2, 0):] {
			names = append(names, l.Line[0].Function.Name)
		}
		roots[strings.Join(names, " < ")] += s.Value[0]
	}
	// A process in no container keeps the comm frame at the root.
	if len(roots) != 2 || roots["app < [container 4f797c539e6c]"] != 47 || roots["entry_SYSCALL_64 < kworker/0:1_x"] != 1 {
		t.Errorf("the two root-most frames and their samples: %v", roots)
	}
}

// TestPprofAddressAtTopOfAddressSpace keeps a garbage return address of -1
// (seen from frame-pointer walks through code without frame pointers) from
// failing the whole export.
func TestPprofAddressAtTopOfAddressSpace(t *testing.T) {
	unknown := &stacks.Mapping{Kind: stacks.Unknown, File: stacks.UnknownFile}
	p := &stacks.Profile{
		Start: time.Unix(1700000000, 0), Duration: time.Second, Period: 10 * time.Millisecond,
		Mappings: []*stacks.Mapping{unknown},
		Samples: []*stacks.Sample{{Count: 1, Pid: 1, Tid: 1, Comm: "x", Stack: []*stacks.Location{
			{Mapping: unknown, Address: 0x1000}, {Mapping: unknown, Address: math.MaxUint64},
		}}},
	}
	pp, err := BuildPprof(p, Options{})
	if err != nil {
		t.Fatalf("BuildPprof: %v", err)
	}
	if err := CheckPprof(pp); err != nil {
		t.Fatalf("CheckPprof: %v", err)
	}
}

// TestPprofMainMapping checks the "File:" line of `go tool pprof -top`:
// the executable of the busiest process, though another process's
// mapping and the busy process's JIT code (a memfd) and libc were seen
// first.
func TestPprofMainMapping(t *testing.T) {
	user := func(file string, start uint64) *stacks.Mapping {
		return &stacks.Mapping{Kind: stacks.User, Start: start, Limit: start + 0x10000, File: file}
	}
	other, jit := user("/usr/bin/other", 0x400000), user("/memfd:jit (deleted)", 0x7e0000000000)
	libc, app := user("/usr/lib/x86_64-linux-gnu/libc.so.6", 0x7f0000000000), user("/opt/app/bin/server", 0x500000)
	loc := func(m *stacks.Mapping) *stacks.Location {
		return &stacks.Location{Mapping: m, Address: m.Start + 0x100}
	}
	p := &stacks.Profile{Start: time.Unix(1700000000, 0), Duration: time.Second, Period: 10 * time.Millisecond,
		Mappings: []*stacks.Mapping{other, jit, libc, app},
		Samples: []*stacks.Sample{
			{Pid: 2, Tid: 2, Comm: "other", Count: 30, Stack: []*stacks.Location{loc(other)}},
			// JIT code and libc in every stack, the executable in most.
			{Pid: 1, Tid: 1, Comm: "server", Count: 20, Stack: []*stacks.Location{loc(jit), loc(libc)}},
			{Pid: 1, Tid: 3, Comm: "worker", Count: 25, Stack: []*stacks.Location{loc(jit), loc(libc), loc(app)}},
		},
	}
	for _, tc := range []struct {
		name, want string
		samples    []*stacks.Sample
	}{
		{"busiest process", "server", p.Samples},
		{"no other process", "server", p.Samples[1:]},
		{"only a library", "libc.so.6", p.Samples[1:2]},
		{"kernel stacks only in the busiest", "other", append([]*stacks.Sample{
			{Pid: 9, Tid: 9, Comm: "kworker/0:1", Count: 99, Stack: []*stacks.Location{{Mapping: &stacks.Mapping{Kind: stacks.Kernel, File: stacks.KernelFile}, Address: 0xffffffff81000000}}},
		}, p.Samples[:1]...)},
	} {
		q := *p
		q.Samples = tc.samples
		var buf bytes.Buffer
		if err := WritePprof(&buf, &q, Options{}); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "cpu.pb.gz")
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		top := string(goTool(t, "pprof", "-top", "-symbolize=none", path))
		if first, _, _ := strings.Cut(top, "\n"); first != "File: "+tc.want {
			t.Errorf("%s: header %q; want File: %s", tc.name, first, tc.want)
		}
	}
}

// TestPprofSymbolsTried: a mapping sprof tried to symbolize is marked
// HasFunctions though none of its addresses has a name (its file was
// deleted), so pprof does not try again; one it did not try is left for
// pprof.
func TestPprofSymbolsTried(t *testing.T) {
	for _, tried := range []bool{false, true} {
		m := &stacks.Mapping{Kind: stacks.User, Start: 0x1000, Limit: 0x2000, File: "/tmp/gone", SymbolsTried: tried}
		p := &stacks.Profile{Period: time.Millisecond, Mappings: []*stacks.Mapping{m},
			Samples: []*stacks.Sample{{Count: 1, Pid: 1, Tid: 1, Stack: []*stacks.Location{{Mapping: m, Address: 0x1010}}}}}
		out, err := BuildPprof(p, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got := out.Mapping[0].HasFunctions; got != tried {
			t.Errorf("SymbolsTried %v: HasFunctions %v", tried, got)
		}
	}
}
