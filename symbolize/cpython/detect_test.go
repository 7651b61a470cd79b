package cpython

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sprof/sprof/internal/pychain"
)

// startInterpreter runs python until the test ends and returns its pid
// once it runs.
func startInterpreter(t *testing.T, python string) uint32 {
	t.Helper()
	cmd := exec.Command(python, "-c", "import sys; print('ready', flush=True); sys.stdin.read()")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		in.Close()
		cmd.Wait()
	})
	if line, err := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		t.Fatalf("%s: %q, %v", python, line, err)
	}
	return uint32(cmd.Process.Pid)
}

// TestDetectDebian finds Debian's python3.11, an executable linked
// statically with the interpreter, and reads its frames' layout from the
// table; no root needed (the file is opened through /proc/PID/root when
// map_files is not allowed).
func TestDetectDebian(t *testing.T) {
	const python = "/usr/bin/python3.11"
	if _, err := os.Stat(python); err != nil {
		t.Skipf("no %s (apt-get install python3.11)", python)
	}
	pid := startInterpreter(t, python)
	maps, err := ReadMaps("/proc", pid)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Detect("/proc", pid, maps)
	if err != nil {
		t.Fatal(err)
	}
	if p.Version != (Version{3, 11}) || p.File != python || p.Layout != tableLayouts[p.Version] || p.Runtime == 0 || p.CodeType == 0 {
		t.Errorf("detected %+v", p)
	}
	if len(p.Eval) == 0 || p.Eval[0].Limit-p.Eval[0].Start < 1000 {
		t.Errorf("_PyEval_EvalFrameDefault at %+v", p.Eval)
	}
}

// TestDetectRejects: a process without Python is not one; pyenv's 3.8,
// where installed, is one sprof cannot read.
func TestDetectRejects(t *testing.T) {
	self := uint32(os.Getpid())
	maps, err := ReadMaps("/proc", self)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Detect("/proc", self, maps); !errors.Is(err, ErrNotPython) {
		t.Errorf("the test binary: %v, want ErrNotPython", err)
	}
	old := pychain.Pyenv("3.8")
	if old == "" {
		t.Log("no pyenv build of Python 3.8: its rejection not tested")
		return
	}
	pid := startInterpreter(t, old)
	if maps, err = ReadMaps("/proc", pid); err != nil {
		t.Fatal(err)
	}
	if _, err := Detect("/proc", pid, maps); !errors.Is(err, ErrUnsupported) {
		t.Errorf("Python 3.8: %v, want ErrUnsupported", err)
	}
}

// TestDetectPthreadTID: for 3.9 and 3.10, which name a thread by its
// pthread_t, Detect finds where glibc keeps the thread's kernel id; the
// kernel's word is the oracle: the main thread's id is the pid, in the
// struct pthread its PyThreadState names.
func TestDetectPthreadTID(t *testing.T) {
	for _, v := range []string{"3.9", "3.10"} {
		t.Run(v, func(t *testing.T) {
			python := pychain.Pyenv(v)
			if python == "" {
				t.Skipf("no pyenv build of Python %s (pyenv install %s)", v, v)
			}
			pid := startInterpreter(t, python)
			maps, err := ReadMaps("/proc", pid)
			if err != nil {
				t.Fatal(err)
			}
			p, err := Detect("/proc", pid, maps)
			if err != nil {
				t.Fatal(err)
			}
			if !p.Layout.ThreadPthread || p.PthreadTID == NoField {
				t.Fatalf("detected %+v", p)
			}
			// Just started, libc not yet mapped by the loader: not an
			// interpreter yet. Without the loader either (a static
			// binary): one sprof cannot read.
			noLibc := slices.DeleteFunc(slices.Clone(maps), func(m Mapping) bool { return libcName.MatchString(filepath.Base(m.Path)) })
			if _, err := Detect("/proc", pid, noLibc); !errors.Is(err, ErrNotPython) || errors.Is(err, ErrUnsupported) {
				t.Errorf("without libc: %v, want ErrNotPython alone", err)
			}
			static := slices.DeleteFunc(noLibc, func(m Mapping) bool { return loaderName.MatchString(filepath.Base(m.Path)) })
			if _, err := Detect("/proc", pid, static); !errors.Is(err, ErrUnsupported) {
				t.Errorf("without libc and its loader: %v, want ErrUnsupported", err)
			}
			mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
			if err != nil {
				t.Fatal(err)
			}
			defer mem.Close()
			word := func(addr uint64) uint64 {
				var b [8]byte
				if _, err := mem.ReadAt(b[:], int64(addr)); err != nil {
					t.Fatalf("reading %#x: %v", addr, err)
				}
				return binary.LittleEndian.Uint64(b[:])
			}
			l := &p.Layout
			interp := word(p.Runtime + l.RuntimeInterpretersHead)
			ts := word(interp + l.InterpThreadsHead)
			pthread := word(ts + l.ThreadNativeID)
			if tid := uint32(word(pthread + p.PthreadTID)); tid != pid {
				t.Errorf("the main thread's struct pthread at %#x says tid %d at offset %d; its pid is %d", pthread, tid, p.PthreadTID, pid)
			}
		})
	}
}
