package exporters

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sprof/sprof/exporters/flamegraph"
)

func TestFlameGraphGolden(t *testing.T) {
	var buf bytes.Buffer
	opt := Options{ProcessRoot: CommRoot, FlameGraph: flamegraph.Options{Title: "sprof"}}
	if err := Write(&buf, fixture(), SVG, opt); err != nil {
		t.Fatal(err)
	}
	svg := buf.String()
	for _, want := range []string{
		`<text id="subtitle" x="600" y="40">48 samples at 99 Hz over 10s from 2026-11-22 10:00:00 UTC, 3 lost</text>`,
		`<title>hash (40 samples, 83.33%)</title>`,
		`<title>kworker/0:1_x (1 samples, 2.08%)</title>`,
		`<title>[kernel] 0xffffffffc0001234 (5 samples, 10.42%)</title>`,
		`<title>mix;step next (40 samples, 83.33%)</title>`,
	} {
		if !strings.Contains(svg, want) {
			t.Errorf("flame graph lacks %s", want)
		}
	}
	// The renderer's package keeps whole SVGs as golden files; here only
	// the frames this package decides on.
	start, end := strings.Index(svg, `<g id="frames">`), strings.Index(svg, "<script")
	if start < 0 || end < start {
		t.Fatal("no frames group before the script")
	}
	checkGolden(t, "fixture.svg-frames", []byte(svg[start:end]))
}

// The title names the subject and the profile's start, so the subtitle
// does not repeat the time; without a subject the title stays the
// renderer's and the subtitle keeps the time.
func TestFlameGraphTitle(t *testing.T) {
	for _, tc := range []struct {
		subject, title, subtitle string
	}{
		{"make -j8 <all> & more", "make -j8 &lt;all&gt; &amp; more, 2026-11-22 10:00:00 UTC", "48 samples at 99 Hz over 10s, 3 lost"},
		{"", "Flame Graph", "48 samples at 99 Hz over 10s from 2026-11-22 10:00:00 UTC, 3 lost"},
	} {
		var buf bytes.Buffer
		if err := Write(&buf, fixture(), SVG, Options{Subject: tc.subject}); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{
			`<text id="title" x="600" y="24">` + tc.title + `</text>`,
			`<text id="subtitle" x="600" y="40">` + tc.subtitle + `</text>`,
		} {
			if !strings.Contains(buf.String(), want) {
				t.Errorf("subject %q: the SVG lacks %s", tc.subject, want)
			}
		}
	}
}
