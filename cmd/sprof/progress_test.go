package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestProgressBar(t *testing.T) {
	var buf bytes.Buffer
	if p := newProgressBar(&buf, "units"); p.w != nil {
		t.Fatal("a buffer is not a terminal, but the bar would draw on it")
	}
	p := &progressBar{w: &buf, label: "units"}
	p.update(1, 4)
	p.update(2, 4) // within 100 ms of the last: skipped
	p.update(9, 4) // the end is always drawn, clamped to the total
	p.done()
	out := buf.String()
	if strings.Count(out, "\r") != 2 || !strings.Contains(out, "] 1/4 units") ||
		!strings.HasSuffix(out, "[========================================] 4/4 units\n") {
		t.Fatalf("bar drew %q", out)
	}
}
