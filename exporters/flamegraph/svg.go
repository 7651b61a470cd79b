package flamegraph

import (
	"bufio"
	_ "embed"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Options shapes the picture. The zero value gives flamegraph.pl's
// defaults.
type Options struct {
	// Title defaults to "Flame Graph", or "Icicle Graph" with Icicle.
	Title string
	// Subtitle is a second line under the title, e.g. what was profiled.
	Subtitle string
	// CountName names what a count counts in tooltips; "samples" if empty.
	CountName string
	// Width is the image width in pixels; 1200 if zero.
	Width int
	// FrameHeight is the height of one frame in pixels; 16 if zero.
	FrameHeight int
	// MinWidth is the narrowest frame drawn, in pixels; 0.1 if zero.
	// Narrower frames and everything above them are left out, which keeps
	// huge profiles small, and a note says how much was hidden.
	MinWidth float64
	// Icicle draws the root at the top and callees below it.
	Icicle bool
}

func (o Options) withDefaults() Options {
	if o.Title == "" {
		o.Title = "Flame Graph"
		if o.Icicle {
			o.Title = "Icicle Graph"
		}
	}
	if o.CountName == "" {
		o.CountName = "samples"
	}
	if o.Width <= 0 {
		o.Width = 1200
	}
	if o.FrameHeight <= 0 {
		o.FrameHeight = 16
	}
	if o.MinWidth <= 0 {
		o.MinWidth = 0.1
	}
	return o
}

const (
	padX = 10.0
	// charWidth is the average advance of a Verdana glyph per pixel of
	// font size; labels are cut to what fits.
	charWidth = 0.59
)

// HighlightColour is the fill of frames matching a search.
const HighlightColour = "rgb(230,0,230)"

//go:embed flamegraph.js
var script string

//go:embed flamegraph.css
var style string

// box is a frame placed in the picture.
type box struct {
	node  int32
	x, w  float64
	depth int
}

// layout is the placed frames and what the minimum width left out.
type layout struct {
	boxes         []box
	maxDepth      int
	hiddenFrames  int
	hiddenSamples int64
}

// WriteSVG renders the tree. It sorts every node's children by name, as
// flame graphs do, so x positions carry no meaning of time.
func (t *Tree) WriteSVG(w io.Writer, opt Options) error {
	opt = opt.withDefaults()
	lay := t.layout(float64(opt.Width)-2*padX, opt.MinWidth)
	bw := bufio.NewWriter(w)
	t.writeSVG(bw, opt, lay)
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write flame graph: %w", err)
	}
	return nil
}

func (t *Tree) layout(graphWidth, minWidth float64) layout {
	var lay layout
	total := t.Total()
	if total == 0 {
		return lay
	}
	scale := graphWidth / float64(total)
	type item struct {
		node  int32
		x     float64
		depth int
	}
	stack := []item{{0, padX, 0}}
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		n := &t.nodes[it.node]
		width := float64(n.count) * scale
		if width < minWidth {
			lay.hiddenSamples += n.count
			lay.hiddenFrames += t.subtreeSize(it.node)
			continue
		}
		lay.boxes = append(lay.boxes, box{it.node, it.x, width, it.depth})
		lay.maxDepth = max(lay.maxDepth, it.depth)
		slices.SortFunc(n.children, func(a, b int32) int { return compareFrames(t.nodes[a].frame, t.nodes[b].frame) })
		x := it.x
		for _, c := range n.children {
			stack = append(stack, item{c, x, it.depth + 1})
			x += float64(t.nodes[c].count) * scale
		}
	}
	return lay
}

func compareFrames(a, b Frame) int {
	if c := strings.Compare(a.Name, b.Name); c != 0 {
		return c
	}
	return int(a.Kind) - int(b.Kind)
}

func (t *Tree) subtreeSize(n int32) int {
	size := 0
	stack := []int32{n}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = append(stack[:len(stack)-1], t.nodes[n].children...)
		size++
	}
	return size
}

// geometry is where things go in the picture, shared with the script.
type geometry struct {
	Left        float64 `json:"left"`
	GraphWidth  float64 `json:"width"`
	Top         int     `json:"top"`
	FrameHeight int     `json:"frameHeight"`
	MaxDepth    int     `json:"maxDepth"`
	Icicle      bool    `json:"icicle"`
	FontSize    float64 `json:"fontSize"`
	CharWidth   float64 `json:"charWidth"`
	Highlight   string  `json:"highlight"`
}

func (t *Tree) writeSVG(w *bufio.Writer, opt Options, lay layout) {
	fh := opt.FrameHeight
	g := geometry{
		Left: padX, GraphWidth: float64(opt.Width) - 2*padX, Top: 3*fh + 16, FrameHeight: fh,
		MaxDepth: lay.maxDepth, Icicle: opt.Icicle, FontSize: float64(fh) * 0.75, CharWidth: charWidth,
		Highlight: HighlightColour,
	}
	height := g.Top + (lay.maxDepth+1)*fh + 2*fh + 4
	width := opt.Width

	fmt.Fprintf(w, `<?xml version="1.0" standalone="no"?>
<svg version="1.1" xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">
<style>%s</style>
<rect class="background" x="0" y="0" width="100%%" height="100%%"/>
`, width, height, width, height, style)
	fmt.Fprintf(w, `<text id="title" x="%d" y="%d">%s</text>`+"\n", width/2, fh+8, escape(opt.Title))
	fmt.Fprintf(w, `<text id="subtitle" x="%d" y="%d">%s</text>`+"\n", width/2, 2*fh+8, escape(opt.Subtitle))
	fmt.Fprintf(w, `<text id="reset" class="button hidden" x="%g" y="%d">Reset Zoom</text>`+"\n", padX, fh+8)
	fmt.Fprintf(w, `<text id="search" class="button" x="%g" y="%d">Search</text>`+"\n", float64(width)-padX, fh+8)
	fmt.Fprintf(w, `<text id="details" x="%g" y="%d"> </text>`+"\n", padX, height-fh/2-2)
	fmt.Fprintf(w, `<text id="matched" x="%g" y="%d"> </text>`+"\n", float64(width)-padX, height-fh/2-2)
	if lay.hiddenFrames > 0 {
		fmt.Fprintf(w, `<text id="hidden" x="%g" y="%d">%s frames narrower than %g px hidden (%s %s, %s)</text>`+"\n",
			float64(width)-padX, 3*fh+8, thousands(int64(lay.hiddenFrames)), opt.MinWidth,
			thousands(lay.hiddenSamples), escape(opt.CountName), percent(lay.hiddenSamples, t.Total()))
	}
	t.writeLegend(w, lay, 3*fh+8)
	if len(lay.boxes) == 0 {
		fmt.Fprintf(w, `<text id="empty" x="%d" y="%d">no %s</text>`+"\n", width/2, g.Top+fh, escape(opt.CountName))
	}

	w.WriteString(`<g id="frames">` + "\n")
	var buf []byte
	for _, b := range lay.boxes {
		buf = t.appendFrame(buf[:0], b, g, opt)
		w.Write(buf)
	}
	w.WriteString("</g>\n")

	cfg, _ := json.Marshal(g) // a struct of numbers and plain strings cannot fail
	fmt.Fprintf(w, "<script type=\"text/ecmascript\"><![CDATA[\nconst geometry = %s;\n%s]]></script>\n</svg>\n", cfg, script)
}

// writeLegend names the colour of each kind of frame drawn, root aside,
// on one line at baseline y.
func (t *Tree) writeLegend(w *bufio.Writer, lay layout, y int) {
	var present [len(kindNames)]bool
	for _, b := range lay.boxes[min(1, len(lay.boxes)):] {
		if k := t.nodes[b.node].frame.Kind; int(k) < len(present) {
			present[k] = true
		}
	}
	w.WriteString(`<g class="legend">`)
	x := padX
	for k, ok := range present {
		if !ok {
			continue
		}
		name := Kind(k).String()
		fmt.Fprintf(w, `<rect x="%.1f" y="%d" width="10" height="10" fill="%s"/><text x="%.1f" y="%d">%s</text>`,
			x, y-9, Colour(Frame{Name: name, Kind: Kind(k)}), x+13, y, name)
		x += 13 + float64(len(name))*11*charWidth + 12
	}
	w.WriteString("</g>\n")
}

// appendFrame appends one frame: a group with a tooltip, a rectangle and,
// if it fits, a label.
func (t *Tree) appendFrame(buf []byte, b box, g geometry, opt Options) []byte {
	n := &t.nodes[b.node]
	y := g.Top + (g.MaxDepth-b.depth)*g.FrameHeight
	if g.Icicle {
		y = g.Top + b.depth*g.FrameHeight
	}
	buf = append(buf, `<g class="f"><title>`...)
	buf = append(buf, escape(n.frame.Name)...)
	buf = append(buf, " ("...)
	buf = append(buf, thousands(n.count)...)
	buf = append(buf, ' ')
	buf = append(buf, escape(opt.CountName)...)
	buf = append(buf, ", "...)
	buf = append(buf, percent(n.count, t.Total())...)
	buf = append(buf, `)</title><rect x="`...)
	buf = strconv.AppendFloat(buf, b.x, 'f', 2, 64)
	buf = append(buf, `" y="`...)
	buf = strconv.AppendInt(buf, int64(y), 10)
	buf = append(buf, `" width="`...)
	buf = strconv.AppendFloat(buf, b.w, 'f', 2, 64)
	buf = append(buf, `" height="`...)
	buf = strconv.AppendInt(buf, int64(g.FrameHeight-1), 10)
	buf = append(buf, `" fill="`...)
	buf = append(buf, Colour(n.frame)...)
	buf = append(buf, `" rx="2" ry="2"/><text x="`...)
	buf = strconv.AppendFloat(buf, b.x+3, 'f', 2, 64)
	buf = append(buf, `" y="`...)
	buf = strconv.AppendFloat(buf, float64(y)+g.FontSize, 'f', 1, 64)
	buf = append(buf, `">`...)
	buf = append(buf, escape(label(n.frame.Name, b.w, g.FontSize))...)
	buf = append(buf, "</text></g>\n"...)
	return buf
}

// label cuts name to what fits in width pixels, marking the cut with "..",
// and returns "" when not even three characters fit.
func label(name string, width, fontSize float64) string {
	fit := int((width - 6) / (fontSize * charWidth))
	if fit < 3 {
		return ""
	}
	if utf8.RuneCountInString(name) <= fit {
		return name
	}
	runes := []rune(name)
	return string(runes[:fit-2]) + ".."
}

// Colour is the fill of a frame: a family per kind, and within it a shade
// derived from the name, so a function keeps its colour from one graph to
// the next.
func Colour(f Frame) string {
	h := fnv.New32a()
	h.Write([]byte(f.Name))
	sum := h.Sum32()
	v1 := float64(sum&0xffff) / 0xffff
	v2 := float64(sum>>16) / 0xffff
	var r, g, b float64
	switch f.Kind {
	case Kernel: // blue
		r, g, b = 110+50*v1, 160+40*v1, 225+30*v2
	case Inlined: // yellow-green
		r, g, b = 150+50*v1, 200+30*v2, 50+50*v1
	case Unsymbolized: // grey
		r = 170 + 30*v1
		g, b = r, r
	case JIT: // green, as perf's flame graphs show Java
		r, g, b = 50+60*v1, 190+55*v2, 50+60*v1
	case Python: // blue-green, Python's own blue leaning to teal
		r, g, b = 40+40*v1, 150+50*v2, 170+40*v1
	case Synthetic: // lavender
		r, g, b = 190+20*v1, 180+20*v1, 230+20*v2
	default: // red to orange, the classic hot palette without yellow
		r, g, b = 205+50*v1, 40+110*v2, 55*v1
	}
	return "rgb(" + strconv.Itoa(int(r)) + "," + strconv.Itoa(int(g)) + "," + strconv.Itoa(int(b)) + ")"
}

// escape makes s safe as XML character data: markup characters become
// entities, and characters XML forbids (control characters, invalid
// UTF-8) become U+FFFD.
func escape(s string) string {
	var b strings.Builder
	for i, r := range s {
		var rep string
		switch {
		case r == '&':
			rep = "&amp;"
		case r == '<':
			rep = "&lt;"
		case r == '>':
			rep = "&gt;"
		case r == '"':
			rep = "&quot;"
		case r == utf8.RuneError || (r < ' ' && r != '\t') || r == 0xfffe || r == 0xffff:
			rep = "\uFFFD"
		default:
			if b.Len() > 0 {
				b.WriteRune(r)
			}
			continue
		}
		if b.Len() == 0 {
			b.WriteString(s[:i])
		}
		b.WriteString(rep)
	}
	if b.Len() == 0 {
		return s
	}
	return b.String()
}

// thousands formats n with comma separators, as flamegraph.pl does.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func percent(n, total int64) string {
	if total == 0 {
		return "0%"
	}
	return strconv.FormatFloat(100*float64(n)/float64(total), 'f', 2, 64) + "%"
}
