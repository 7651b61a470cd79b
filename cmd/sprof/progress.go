package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// progressBar draws how far a long step has come on a terminal, and
// nothing elsewhere, so logs and pipes stay clean. It redraws at most ten
// times a second.
type progressBar struct {
	w     io.Writer // nil: not a terminal
	label string    // what is counted, after "done/total"
	last  time.Time
	drew  bool
}

// newProgressBar returns a bar on w when w is a terminal.
func newProgressBar(w io.Writer, label string) *progressBar {
	p := &progressBar{label: label}
	if f, ok := w.(*os.File); ok {
		if _, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err == nil {
			p.w = w
		}
	}
	return p
}

// update shows done of total.
func (p *progressBar) update(done, total int64) {
	done = min(done, total)
	if p.w == nil || (done != total && time.Since(p.last) < 100*time.Millisecond) {
		return
	}
	p.last = time.Now()
	const width = 40
	n := int(width * done / max(total, 1))
	fmt.Fprintf(p.w, "\r[%s%s] %d/%d %s", strings.Repeat("=", n), strings.Repeat(" ", width-n), done, total, p.label)
	p.drew = true
}

// done ends the bar's line.
func (p *progressBar) done() {
	if p.drew {
		fmt.Fprintln(p.w)
	}
}
