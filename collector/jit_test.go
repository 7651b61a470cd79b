package collector

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sprof/sprof/symbolize/jit"
)

// jitSink is a logSink that stores JIT symbols too.
type jitSink struct {
	logSink
}

func (s *jitSink) JIT(t time.Time, pid uint32, sym *jit.Symbol) error {
	s.log = append(s.log, fmt.Sprintf("%v jit %d %#x+%#x %s", s.at(t), pid, sym.Start, sym.Size, sym.Name))
	return nil
}

// fakeJITProcess lays out /proc for pid 10, which is pid 3 in its
// namespace, and returns the path of its perf map as sprof opens it.
func fakeJITProcess(t *testing.T, procRoot string) string {
	t.Helper()
	dir := filepath.Join(procRoot, "10")
	if err := os.MkdirAll(filepath.Join(dir, "root", "tmp"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "status"), []byte("Name:\tnode\nNSpid:\t10\t3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "root", "tmp", "perf-3.map")
}

// TestJITFrames: a process runs code in no mapped file, named in its perf
// map; the map grows between drains, and a symbol that arrives after the
// sample that used it still reaches the profile and the Sink.
func TestJITFrames(t *testing.T) {
	procRoot := t.TempDir()
	perfMap := fakeJITProcess(t, procRoot)
	if err := os.WriteFile(perfMap, []byte("7f0000001000 100 JS:*hot /app.js:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, withSink := range []bool{false, true} {
		sink := &jitSink{}
		opts := Options{Frequency: 99, ProcRoot: procRoot, NoSideband: true, Symbolizer: &fakeSymbolizer{}}
		if withSink {
			opts.Sink = sink
		}
		c, err := New(opts)
		if err != nil {
			t.Fatal(err)
		}
		c.events = []event{mmapEvent(1, 10, 0x1000, 0x3000, 0, "/usr/bin/node", []byte{0xaa})}
		src := &fakeSource{}
		// Leaf in hot, called from later code, called from node.
		src.add(10, 5, 0x7f0000001010, 0x7f0000002008, 0x1100)
		if err := c.Drain(src); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(perfMap, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(f, "7f0000002000 10 JS:~later /app.js:9\n")
		f.Close()
		if err := c.Drain(src); err != nil {
			t.Fatal(err)
		}
		if withSink {
			want := []string{"0s jit 10 0x7f0000001000+0x100 JS:*hot /app.js:1", "0s jit 10 0x7f0000002000+0x10 JS:~later /app.js:9"}
			var got []string
			for _, l := range sink.log {
				if strings.Contains(l, " jit ") {
					got = append(got, l)
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("the Sink got %q, want %q", got, want)
			}
			c.Close()
			continue
		}
		p := c.Profile()
		if got, want := names(p.Samples[0]), []string{"JS:*hot /app.js:1", "JS:~later /app.js:9", "/usr/bin/node+0xff"}; !slices.Equal(got, want) {
			t.Errorf("profile: %q, want %q", got, want)
		}
		if m := p.Samples[0].Stack[0].Mapping; m.File != "[jit pid 10]" || m.Kind.String() != "jit" {
			t.Errorf("JIT frame on mapping %+v", m)
		}
		c.Close()
	}
}

// TestJITFramesAcrossCuts: the agent's intervals name JIT frames in each
// one, and the JIT files of a process that exited are closed once the
// table forgets it.
func TestJITFramesAcrossCuts(t *testing.T) {
	procRoot := t.TempDir()
	perfMap := fakeJITProcess(t, procRoot)
	if err := os.WriteFile(perfMap, []byte("7f0000001000 100 JS:*hot /app.js:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := New(Options{Frequency: 99, ProcRoot: procRoot, NoSideband: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.events = []event{mmapEvent(1, 10, 0x1000, 0x3000, 0, "/usr/bin/node", []byte{0xaa})}
	for cut := range 2 {
		src := &fakeSource{}
		src.add(10, uint64(5+cut), 0x7f0000001010)
		p, _ := c.Cut(src)
		if len(p.Samples) != 1 || names(p.Samples[0])[0] != "JS:*hot /app.js:1" {
			t.Fatalf("interval %d: %+v", cut, p.Samples)
		}
	}
	// Sample times are CLOCK_MONOTONIC: time 7 is long past the grace.
	c.events = []event{{time: 7, kind: eventExit, pid: 10, tid: 10}}
	c.Cut(&fakeSource{})
	if len(c.jit.byPid) != 0 {
		t.Errorf("the JIT files of an exited process are still open")
	}
}
