package exporters

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/sprof/sprof/exporters/flamegraph"
	"github.com/sprof/sprof/stacks"
)

// WriteFlameGraph writes p as an interactive SVG flame graph, frames
// coloured by kind, named as in folded output without the suffixes.
func WriteFlameGraph(w io.Writer, p *stacks.Profile, opt Options) error {
	t := flamegraph.NewTree()
	var frames []frame
	var stack []flamegraph.Frame
	for _, ws := range aggregate(p.Samples, opt.ProcessRoot) {
		frames = rootFirst(frames[:0], ws.sample, &opt)
		stack = stack[:0]
		for _, f := range frames {
			stack = append(stack, flamegraph.Frame{Name: cleanName(f.name), Kind: f.kind})
		}
		t.Add(stack, ws.count)
	}
	fo := opt.FlameGraph
	titled := fo.Title == "" && opt.Subject != ""
	if titled {
		fo.Title = opt.Subject
		if !p.Start.IsZero() {
			fo.Title += ", " + p.Start.UTC().Format(startLayout)
		}
	}
	if fo.Subtitle == "" {
		fo.Subtitle = describe(p, t.Total(), !titled)
	}
	return t.WriteSVG(w, fo)
}

const startLayout = "2006-01-02 15:04:05 UTC"

// describe says in one line what a profile covers: how many samples, at
// which frequency, over what time, and from when unless the title says.
func describe(p *stacks.Profile, samples int64, start bool) string {
	s := strconv.FormatInt(samples, 10) + " samples"
	if p.Period > 0 {
		s += fmt.Sprintf(" at %.4g Hz", float64(time.Second)/float64(p.Period))
	}
	if p.Duration > 0 {
		s += " over " + p.Duration.String()
	}
	if start && !p.Start.IsZero() {
		s += " from " + p.Start.UTC().Format(startLayout)
	}
	if p.Lost > 0 {
		s += ", " + strconv.FormatUint(p.Lost, 10) + " lost"
	}
	return s
}
