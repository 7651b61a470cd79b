package flamegraph

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sprof/sprof/internal/testenv"
)

// screenshot renders the SVG file at path in Debian's headless Chromium,
// with query appended to its URL, and returns the picture.
func screenshot(t *testing.T, chromium, path, query string, height int) image.Image {
	t.Helper()
	dir := t.TempDir()
	out := filepath.Join(dir, "shot.png")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--hide-scrollbars",
		"--window-size=1200,"+strconv.Itoa(height), "--virtual-time-budget=2000",
		"--screenshot="+out, "file://"+path+query)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.Bytes())
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatalf("chromium wrote no screenshot: %v\n%s", err, stderr.Bytes())
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("decode screenshot: %v", err)
	}
	return img
}

// palette counts the pixels of each frame colour family and of the search
// highlight below the header (title, buttons, legend), where frames are.
type palette struct{ user, kernel, inlined, unsymbolized, highlight int }

func countColours(img image.Image) palette {
	var p palette
	b := img.Bounds()
	top := 3*16 + 16 // geometry.Top for the default frame height
	for y := b.Min.Y + top; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r16, g16, b16, _ := img.At(x, y).RGBA()
			r, g, bl := int(r16>>8), int(g16>>8), int(b16>>8)
			switch {
			case r == 230 && g == 0 && bl == 230:
				p.highlight++
			case r >= 205 && g >= 40 && g <= 150 && bl <= 55:
				p.user++
			case r >= 110 && r <= 160 && g >= 160 && g <= 200 && bl >= 225:
				p.kernel++
			case r >= 150 && r <= 200 && g >= 200 && g <= 230 && bl >= 50 && bl <= 100:
				p.inlined++
			case r == g && g == bl && r >= 170 && r <= 200:
				p.unsymbolized++
			}
		}
	}
	return p
}

// TestChromiumScreenshot renders a flame graph in a real browser and checks
// from the pixels that it drew frames of every kind, that ?s= search
// paints the matches in the highlight colour, and that ?z= zoom widens a
// frame to the whole graph.
func TestChromiumScreenshot(t *testing.T) {
	chromium := testenv.RequireTool(t, "chromium")
	path := filepath.Join(t.TempDir(), "flamegraph.svg")
	var buf bytes.Buffer
	if err := sampleTree().WriteSVG(&buf, Options{}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	const height = 220
	// Each frame is 15 px high; work is ~945 px wide, hash ~709 px.
	t.Run("plain", func(t *testing.T) {
		t.Parallel()
		p := countColours(screenshot(t, chromium, path, "", height))
		t.Logf("pixels per colour: %+v", p)
		if p.user < 20000 || p.kernel < 3000 || p.inlined < 8000 || p.unsymbolized < 2000 {
			t.Errorf("too few frame pixels drawn: %+v", p)
		}
		if p.highlight != 0 {
			t.Errorf("%d highlighted pixels without a search", p.highlight)
		}
	})
	t.Run("search", func(t *testing.T) {
		t.Parallel()
		p := countColours(screenshot(t, chromium, path, "?s=^work$", height))
		t.Logf("pixels per colour: %+v", p)
		if p.highlight < 10000 {
			t.Errorf("search for work highlighted %d pixels, want the ~14,000 of its frame", p.highlight)
		}
	})
	t.Run("zoom", func(t *testing.T) {
		t.Parallel()
		p := countColours(screenshot(t, chromium, path, "?z=work", height))
		t.Logf("pixels per colour: %+v", p)
		// Zoomed into work, hash (3/4 of work) spans ~885 px and the
		// kernel frames outside work are hidden.
		if p.inlined < 11000 || p.kernel != 0 || p.unsymbolized != 0 {
			t.Errorf("zoom into work: %+v, want inlined ≥ 11000 px and no kernel or unsymbolized pixels", p)
		}
	})
}
