package flamegraph

import (
	"bytes"
	"encoding/xml"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sprof/sprof/exporters/internal/golden"
)

// sampleTree is a small profile: main calls work (which inlines hash) and
// a libc write that enters the kernel; a sliver of rare frames is too
// narrow to draw at 1200 px.
func sampleTree() *Tree {
	t := NewTree()
	main := Frame{"main", User}
	work := Frame{"work", User}
	t.Add([]Frame{main, work, {"hash", Inlined}}, 60000)
	t.Add([]Frame{main, work}, 20000)
	t.Add([]Frame{main, {"libc.so.6+0x3a345", Unsymbolized}, {"entry_SYSCALL_64", Kernel}, {"ksys_write", Kernel}}, 19000)
	t.Add([]Frame{{"[truncated]", Synthetic}, {"<unsafe> & \"quoted\"\n", User}}, 900)
	for i := range 10 {
		t.Add([]Frame{main, {"rare" + strconv.Itoa(i), User}, {"deeper", User}}, 1) // 1180 px / 99,910 < 0.1 px
	}
	t.Add([]Frame{main, {"tiny", User}, {"tinier", User}}, 0)
	return t
}

type svgDoc struct {
	Height string     `xml:"height,attr"`
	Texts  []svgText  `xml:"text"`
	Groups []svgGroup `xml:"g"`
}

type svgText struct {
	ID    string `xml:"id,attr"`
	Value string `xml:",chardata"`
}

type svgGroup struct {
	ID     string     `xml:"id,attr"`
	Frames []svgFrame `xml:"g"`
}

type svgFrame struct {
	Title string `xml:"title"`
	Rect  struct {
		X     string `xml:"x,attr"`
		Y     string `xml:"y,attr"`
		Width string `xml:"width,attr"`
		Fill  string `xml:"fill,attr"`
	} `xml:"rect"`
	Text string `xml:"text"`
}

func (f svgFrame) num(s string) float64 {
	v, _ := strconv.ParseFloat(s, 64)
	return v
}

func render(t *testing.T, tree *Tree, opt Options) ([]byte, svgDoc) {
	t.Helper()
	var buf bytes.Buffer
	if err := tree.WriteSVG(&buf, opt); err != nil {
		t.Fatal(err)
	}
	var doc svgDoc
	if err := xml.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("the SVG is not well-formed XML: %v", err)
	}
	return buf.Bytes(), doc
}

func (d svgDoc) frames() []svgFrame {
	for _, g := range d.Groups {
		if g.ID == "frames" {
			return g.Frames
		}
	}
	return nil
}

func (d svgDoc) text(id string) string {
	for _, t := range d.Texts {
		if t.ID == id {
			return t.Value
		}
	}
	return ""
}

func TestSVGGolden(t *testing.T) {
	out, _ := render(t, sampleTree(), Options{Subtitle: "test"})
	checkGolden(t, "flamegraph.svg", out)
	out, _ = render(t, sampleTree(), Options{Icicle: true, MinWidth: 1})
	checkGolden(t, "icicle.svg", out)
}

func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	golden.Check(t, filepath.Join("..", "..", "testdata", "exporters", name), got)
}

// TestSVGLayout checks the geometry a flame graph promises: the root spans
// the graph, children lie inside their parent and their widths add up to
// at most the parent's, siblings are sorted by name, rows are one frame
// apart.
func TestSVGLayout(t *testing.T) {
	for _, icicle := range []bool{false, true} {
		_, doc := render(t, sampleTree(), Options{Icicle: icicle})
		frames := doc.frames()
		byName := map[string]svgFrame{}
		for _, f := range frames {
			byName[f.Title[:strings.LastIndex(f.Title, " (")]] = f
		}
		root := byName["all"]
		if root.num(root.Rect.X) != padX || math.Abs(root.num(root.Rect.Width)-1180) > 0.01 {
			t.Fatalf("root at x=%s width=%s, want %g and 1180", root.Rect.X, root.Rect.Width, padX)
		}
		if root.Title != "all (99,910 samples, 100.00%)" {
			t.Errorf("root title %q", root.Title)
		}
		main, work, hash := byName["main"], byName["work"], byName["hash"]
		if got, want := main.num(main.Rect.Width), 1180*99010.0/99910; math.Abs(got-want) > 0.01 {
			t.Errorf("main width %g, want %g", got, want)
		}
		if main.num(main.Rect.X) < root.num(root.Rect.X) || work.num(work.Rect.X) < main.num(main.Rect.X) ||
			hash.num(hash.Rect.X)+hash.num(hash.Rect.Width) > work.num(work.Rect.X)+work.num(work.Rect.Width)+0.01 {
			t.Errorf("children outside their parents: main %+v work %+v hash %+v", main.Rect, work.Rect, hash.Rect)
		}
		// libc.so.6+… sorts before work, so it starts where main starts.
		if lib := byName["libc.so.6+0x3a345"]; lib.Rect.X != main.Rect.X {
			t.Errorf("first child of main at %s, want %s (siblings sorted by name)", lib.Rect.X, main.Rect.X)
		}
		step := main.num(main.Rect.Y) - root.num(root.Rect.Y)
		if icicle != (step > 0) || math.Abs(step) != 16 {
			t.Errorf("icicle=%v: main is %g px from the root", icicle, step)
		}
		if hash.Rect.Fill == work.Rect.Fill || byName["ksys_write"].Rect.Fill == work.Rect.Fill {
			t.Errorf("kinds share colours: %s %s %s", hash.Rect.Fill, work.Rect.Fill, byName["ksys_write"].Rect.Fill)
		}
		if _, ok := byName["rare0"]; ok {
			t.Error("a frame narrower than 0.1 px was drawn")
		}
		if got := doc.text("hidden"); got != "20 frames narrower than 0.1 px hidden (10 samples, 0.01%)" {
			t.Errorf("hidden note %q", got)
		}
		if _, ok := byName["<unsafe> & \"quoted\"\ufffd"]; !ok {
			t.Errorf("escaped name not found among %d frames", len(frames))
		}
	}
}

func TestSVGEmpty(t *testing.T) {
	_, doc := render(t, NewTree(), Options{})
	if len(doc.frames()) != 0 || doc.text("empty") != "no samples" {
		t.Errorf("empty tree: %d frames, note %q", len(doc.frames()), doc.text("empty"))
	}
}

func TestLabel(t *testing.T) {
	for _, tc := range []struct {
		name  string
		width float64
		want  string
	}{
		{"main", 100, "main"},
		{"a_long_function_name", 60, "a_lon.."},
		{"abc", 20, ""},
		{"ünïcödé_name_here", 60, "ünïcö.."},
	} {
		if got := label(tc.name, tc.width, 12); got != tc.want {
			t.Errorf("label(%q, %g) = %q, want %q", tc.name, tc.width, got, tc.want)
		}
	}
}

func TestScriptIsCDATASafe(t *testing.T) {
	if strings.Contains(script, "]]>") {
		t.Fatal("the script contains ]]>, which would end its CDATA section")
	}
}

func TestThousands(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -1234: "-1,234"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}
