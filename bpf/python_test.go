package bpf

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sprof/sprof/internal/pychain"
	"github.com/sprof/sprof/internal/testenv"
	"github.com/sprof/sprof/symbolize/cpython"
)

// allEntries reports whether every frame of python is an entry frame:
// 3.9 and 3.10 run each in a _PyEval_EvalFrameDefault call of its own.
func allEntries(python string) bool {
	v, _ := cpython.Interpreter(python)
	return v.Minor < 11
}

// TestPythonFrames checks the Python frames the sampler records against
// what the interpreter's own objects say: ≥ 95% of the samples of the
// fixture's thread name its chain from <module>, and the entry flags mark
// the frames a C call started (<module>, and the json callback).
func TestPythonFrames(t *testing.T) {
	requireFixture(t)
	for _, python := range pychain.Interpreters(t) {
		t.Run(filepath.Base(python), func(t *testing.T) { testPythonFrames(t, python) })
	}
}

func testPythonFrames(t *testing.T, python string) {
	onEveryPath(t, func(t *testing.T, features *Features) {
		got := sampleChains(t, python, features, "../testdata/python/chain.py")
		mark := func(names ...string) []string {
			for i := range names {
				if i == 0 || allEntries(python) {
					names[i] += "*"
				}
			}
			return names
		}
		leaf, encode := mark("<module>", "outer", "middle", "leaf"), mark("<module>", "outer", "middle", "encode")
		good := 0
		for _, x := range got {
			switch {
			case x.truncated:
			case slices.Equal(x.chain, leaf), len(x.chain) >= 4 && slices.Equal(x.chain[:4], encode):
				good++
			default:
				t.Logf("chain %v", x.chain)
			}
		}
		if good < len(got)*95/100 {
			t.Errorf("%d of %d samples have the fixture's chain", good, len(got))
		} else {
			t.Logf("%d of %d samples have the fixture's chain", good, len(got))
		}
	})
}

// TestPythonUnreadable: where the interpreter's state cannot be read, a
// sample of a Python process says its Python frames are unknown
// (PythonTruncated, so the profile never shows its native stack as
// whole), not that the thread runs no Python. The layout given points
// _PyRuntime into the unmapped first page of the address space.
func TestPythonUnreadable(t *testing.T) {
	requireFixture(t)
	python := testenv.RequireTool(t, pychain.Debian)
	cmd := pychain.Start(t, python, "../testdata/python/chain.py")
	pid := uint32(cmd.Process.Pid)
	p := detectPython(t, pid)
	p.Runtime = 0x100
	onEveryPath(t, func(t *testing.T, features *Features) {
		got := collectPython(t, pid, p, features, 50)
		for _, x := range got {
			if !x.PythonTruncated || len(x.Python) != 0 {
				t.Fatalf("a sample has %d Python words, PythonTruncated %v; want none, truncated", len(x.Python), x.PythonTruncated)
			}
		}
		t.Logf("%d samples, all with their Python frames unknown", len(got))
	})
}

// TestPythonDepthLimit: a Python stack of PY_MAX_FRAMES frames is whole,
// and one a frame deeper is cut there and marked truncated, on every path
// (the walk's loop counts its turns, and a cycle in a hostile process's
// chain ends there).
func TestPythonDepthLimit(t *testing.T) {
	requireFixture(t)
	python := testenv.RequireTool(t, pychain.Debian)
	for _, depth := range []int{maxPythonFrames, maxPythonFrames + 1} {
		t.Run(fmt.Sprint(depth), func(t *testing.T) {
			truncated := depth > maxPythonFrames
			cmd := pychain.Start(t, python, "../testdata/python/deep.py", fmt.Sprint(depth))
			pid := uint32(cmd.Process.Pid)
			p := detectPython(t, pid)
			onEveryPath(t, func(t *testing.T, features *Features) {
				got := collectPython(t, pid, p, features, 50)
				for _, x := range got {
					if n := len(x.Python) / 2; n != maxPythonFrames || x.PythonTruncated != truncated {
						t.Fatalf("a sample has %d Python frames, truncated %v; want %d, truncated %v",
							n, x.PythonTruncated, maxPythonFrames, truncated)
					}
				}
				t.Logf("%d samples of %d frames, truncated %v", len(got), maxPythonFrames, truncated)
			})
		})
	}
}

// collectPython samples Python process pid, whose interpreter is p, at
// 499 Hz until n samples of it or 10 s. The process is marked before the
// first sample, as pipeline.Open marks: every sample has its Python part.
func collectPython(t *testing.T, pid uint32, p *cpython.Process, features *Features, n int) []sampleCopy {
	t.Helper()
	s := loadSampler(t, Config{Frequency: 499, User: true, Pids: []uint32{pid}, Python: true, features: features})
	if err := s.SetPython(pid, p); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	return collectN(t, s, n, ofPid(int(pid)))
}

// detectPython finds the interpreter of Python process pid.
func detectPython(t testing.TB, pid uint32) *cpython.Process {
	t.Helper()
	maps, err := cpython.ReadMaps("/proc", pid)
	if err != nil {
		t.Fatal(err)
	}
	p, err := cpython.Detect("/proc", pid, maps)
	if err != nil {
		t.Fatalf("Detect: %v", err)
	}
	return p
}

// pySample is a sample's Python chain, root first, each frame's function
// named from the interpreter's code objects ("?" when unreadable) and
// marked "*" when it is an entry frame.
type pySample struct {
	tid       uint32
	chain     []string
	truncated bool
}

// sampleChains runs a Python fixture (args) under python, samples it at
// 499 Hz with its Python frames until 200 samples or 10 s, and names
// the frames.
func sampleChains(t *testing.T, python string, features *Features, args ...string) []pySample {
	t.Helper()
	cmd := pychain.Start(t, python, args...)
	pid := uint32(cmd.Process.Pid)
	p := detectPython(t, pid)
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	r := cpython.NewReader(mem, p)
	got := collectPython(t, pid, p, features, 200)
	if len(got) < 100 {
		t.Fatalf("%d samples of the fixture", len(got))
	}
	out := make([]pySample, 0, len(got))
	for _, x := range got {
		ps := pySample{tid: x.Tid, truncated: x.PythonTruncated}
		for i := len(x.Python) - 2; i >= 0; i -= 2 {
			f := r.Locate(cpython.Sampled{Code: x.Python[i], Instr: x.Python[i+1]})
			fr, ok := r.Frame(f.CodeAddr(), f.Instr)
			name := fr.Function
			if !ok {
				name = "?"
			}
			if f.Entry() {
				name += "*"
			}
			ps.chain = append(ps.chain, name)
		}
		out = append(out, ps)
	}
	return out
}

// TestPythonShapes: the Python chain of threads, of C code that released
// the GIL, of a generator and of coroutines (testdata/python/shapes.py)
// ends in the functions running in ≥ 95% of the samples, on every thread
// that runs them. The C-extension callback is TestPythonFrames' json
// branch.
func TestPythonShapes(t *testing.T) {
	requireFixture(t)
	for _, python := range pychain.Interpreters(t) {
		t.Run(filepath.Base(python), func(t *testing.T) { testPythonShapes(t, python) })
	}
}

func testPythonShapes(t *testing.T, python string) {
	for _, tc := range []struct {
		mode    string
		ends    []string // the chain's last frames, entry marks dropped
		threads int      // threads that must show them
	}{
		{"threads", []string{"worker", "spin"}, 2},
		{"gil", []string{"hasher", "hash_loop"}, 2},
		{"generator", []string{"consume", "gen"}, 1},
		{"async", []string{"amain", "amiddle", "aleaf"}, 1},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			got := sampleChains(t, python, nil, "../testdata/python/shapes.py", tc.mode)
			good, tids := 0, map[uint32]bool{}
			for _, x := range got {
				var chain []string
				for _, name := range x.chain {
					chain = append(chain, strings.TrimSuffix(name, "*"))
				}
				if !x.truncated && len(chain) >= len(tc.ends) && slices.Equal(chain[len(chain)-len(tc.ends):], tc.ends) {
					good++
					tids[x.tid] = true
				} else if len(got)-good < 10 {
					t.Logf("chain %v", x.chain)
				}
			}
			if good < len(got)*95/100 || len(tids) < tc.threads {
				t.Errorf("%d of %d samples, on %d threads, end in %v; want >= 95%% on %d", good, len(got), len(tids), tc.ends, tc.threads)
			} else {
				t.Logf("%d of %d samples, on %d threads, end in %v", good, len(got), len(tids), tc.ends)
			}
		})
	}
}

// BenchmarkPythonWalk measures what the Python walk adds to a sample of a
// Python stack 30 frames deep (testdata/python/deep.py under Debian's
// python3.11, whose frames are _PyInterpreterFrames, and pyenv's 3.10,
// whose are PyFrameObjects, where installed), from the kernel's BPF
// run-time statistics: two samplers follow the same two processes, one
// recording their Python frames and one not, and python-ns/sample is the
// difference of their run times per sample sent. Each iteration is one
// 10 ms drain.
func BenchmarkPythonWalk(b *testing.B) {
	requireFixture(b)
	testenv.RequireTool(b, pychain.Debian)
	for _, python := range []string{pychain.Debian, pychain.Pyenv("3.10")} {
		if python == "" {
			b.Log("no pyenv build of Python 3.10: its walk not measured (pyenv install 3.10)")
			continue
		}
		b.Run(filepath.Base(python), func(b *testing.B) { benchmarkPythonWalk(b, python) })
	}
}

func benchmarkPythonWalk(b *testing.B, python string) {
	for _, path := range kernelPaths {
		b.Run(path.name, func(b *testing.B) {
			var pids []uint32
			var procs []*cpython.Process
			for range 2 {
				cmd := pychain.Start(b, python, "../testdata/python/deep.py", "30")
				pid := uint32(cmd.Process.Pid)
				pids, procs = append(pids, pid), append(procs, detectPython(b, pid))
			}
			cfg := Config{Frequency: 999, User: true, Pids: pids, RunTimeStats: true, features: pathFeatures(path.without)}
			plain := openSampler(b, cfg)
			cfg.Python = true
			py := openSampler(b, cfg)
			for i, pid := range pids {
				if err := py.SetPython(pid, procs[i]); err != nil {
					b.Fatal(err)
				}
			}
			// The code objects are named as the collector names them:
			// until then their samples wake the reader.
			var frames, samples int
			named := map[uint64]bool{}
			count := func(x *Sample) {
				samples++
				frames += len(x.Python) / 2
				for i := 0; i+1 < len(x.Python); i += 2 {
					if code := x.Python[i] &^ 1; !named[code] {
						named[code] = true
						if err := py.PythonNamed(x.Pid, code); err != nil {
							b.Fatal(err)
						}
					}
				}
			}
			for b.Loop() {
				time.Sleep(10 * time.Millisecond)
				if _, err := py.Read(count); err != nil {
					b.Fatal(err)
				}
				if _, err := plain.Read(func(*Sample) {}); err != nil {
					b.Fatal(err)
				}
			}
			on, err := py.Stats()
			if err != nil {
				b.Fatal(err)
			}
			off, err := plain.Stats()
			if err != nil {
				b.Fatal(err)
			}
			if on.Sent == 0 || off.Sent == 0 || samples == 0 {
				b.Fatalf("no samples: %+v %+v", on, off)
			}
			b.ReportMetric(float64(on.RunTimeNs)/float64(on.Sent)-float64(off.RunTimeNs)/float64(off.Sent), "python-ns/sample")
			b.ReportMetric(float64(on.RunTimeNs)/float64(on.Sent), "bpf-ns/sample")
			b.ReportMetric(float64(frames)/float64(samples), "python-frames/sample")
		})
	}
}

// newCodeScript runs early until a line arrives on stdin, then late for
// ever: after the line, its samples hold a code object none before held.
const newCodeScript = `
import sys, threading
go = threading.Event()
def wait_line():
    sys.stdin.readline()
    go.set()
threading.Thread(target=wait_line, daemon=True).start()
def early():
    s = 0
    for i in range(1000):
        s += i
    return s
def late():
    s = 0
    for i in range(1000):
        s ^= i
    return s
while not go.is_set():
    early()
while True:
    late()
`

// TestPythonNewCodeWakes: a Python process that runs a code object the
// reader has not named (PythonNamed) wakes the reader at once, not when the
// ring is a quarter full, and marks the sample PythonFresh, so that user space reads the object's name while
// the process still runs; before, the function a script ran in its last
// moments went unnamed. One that runs only named code objects does not.
func TestPythonNewCodeWakes(t *testing.T) {
	requireFixture(t)
	testenv.RequireTool(t, pychain.Debian)
	cmd, stdin := startBinary(t, pychain.Debian, "-c", newCodeScript)
	pid := uint32(cmd.Process.Pid)
	const ring = 1 << 20
	s := loadSampler(t, Config{Frequency: 499, User: true, Pids: []uint32{pid}, Python: true, RingBufferSize: ring})
	if err := s.SetPython(pid, detectPython(t, pid)); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	// Every code object read is named, as the collector names them, at
	// the time named holds (CLOCK_MONOTONIC, as samples' times); note
	// says whether x held one not named before. A sample marked
	// PythonFresh whose innermost code object was named before the sample
	// was taken is an error; marked notes one whose was not named yet,
	// and stale one whose was named after it was taken, which may wake
	// the reader after its code object was named.
	named := map[uint64]uint64{}
	marked, stale := false, false
	note := func(x *Sample) (fresh bool) {
		if x.Pid != pid {
			return false
		}
		if x.PythonFresh {
			inner := x.Python[0] &^ 1 // PY_FRAME_ENTRY
			at, ok := named[inner]
			switch {
			case !ok:
				marked = true
			case at < x.Time:
				t.Errorf("a sample taken at %d ns is marked PythonFresh, its code object %#x named at %d", x.Time, inner, at)
			default:
				stale = true
			}
		}
		for i := 0; i+1 < len(x.Python); i += 2 {
			code := x.Python[i] &^ 1
			if _, ok := named[code]; ok {
				continue
			}
			if err := s.PythonNamed(pid, code); err != nil {
				t.Fatal(err)
			}
			fresh, named[code] = true, monotonicNow(t)
		}
		return fresh
	}
	for _, x := range collectN(t, s, 200, func(x *Sample) bool { return x.Pid == pid && len(x.Python) > 0 }) {
		note(&x.Sample)
	}
	// awaitWake reads the ring at each wakeup until one comes with a
	// sample of a code object not named before, or with the ring a
	// quarter full, and returns what the ring held then and whether it
	// held such a sample. A wakeup with neither, nor a sample marked
	// before its code object was named, is an error: the program woke the
	// reader for named code objects.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	awaitWake := func(what string) (held int, fresh bool) {
		t.Helper()
		start, _ := filterCPU(t, s)
		for {
			select {
			case <-s.Ready():
			case <-tick.C:
				if ran, running := filterCPU(t, s); !running || ran-start >= 20*time.Second {
					t.Fatalf("%s: no wakeup in %v of the process's CPU time", what, ran-start)
				}
				continue
			}
			held, stale = s.reader.AvailableBytes(), false
			if _, err := s.Read(func(x *Sample) { fresh = note(x) || fresh }); err != nil {
				t.Fatal(err)
			}
			if fresh || held >= ring/4 {
				return held, fresh
			}
			if !stale {
				t.Errorf("%s: woken with %d bytes in the ring and no code object not named before", what, held)
			}
		}
	}
	if _, err := s.Read(func(x *Sample) { note(x) }); err != nil {
		t.Fatal(err)
	}
	for len(s.Ready()) > 0 {
		<-s.Ready()
	}
	// The process runs a few code objects; once all are named, only a
	// quarter-full ring wakes the reader.
	for i := 0; ; i++ {
		held, fresh := awaitWake("named code only")
		if !fresh {
			break
		}
		if i == 10 {
			t.Fatalf("woken 10 times for code objects not named before, the last with %d bytes in the ring: the process keeps running new ones", held)
		}
	}
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	marked = false
	held, fresh := awaitWake("after the line")
	t.Logf("after the line: woken with %d KiB of %d in the ring, a new code object %v", held>>10, ring>>10, fresh)
	if !fresh || held >= ring/4 {
		t.Errorf("after the line the reader was woken with %d bytes in the ring, a new code object %v: want fewer than a quarter, and one", held, fresh)
	}
	if !marked {
		t.Error("after the line no sample of a code object not named before was marked PythonFresh")
	}
}
