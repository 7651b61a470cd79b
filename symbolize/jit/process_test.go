package jit

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

// fakeProc lays out what NewProcess reads of /proc for pid 4242, which is
// pid 7 in its own namespace, and returns the proc root and the process's
// /tmp.
func fakeProc(t *testing.T) (procRoot, tmp string) {
	procRoot = t.TempDir()
	dir := filepath.Join(procRoot, "4242")
	tmp = filepath.Join(dir, "root", "tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	status := "Name:\tnode\nPid:\t4242\nNSpid:\t4242\t7\n"
	if err := os.WriteFile(filepath.Join(dir, "status"), []byte(status), 0o644); err != nil {
		t.Fatal(err)
	}
	return procRoot, tmp
}

func name(p *Process, addr uint64) string {
	if s := p.Symbols.Lookup(addr); s != nil {
		return s.Name
	}
	return ""
}

func appendFile(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

func TestProcessPerfMapGrowsAndOutlivesTheFile(t *testing.T) {
	procRoot, tmp := fakeProc(t)
	path := filepath.Join(tmp, "perf-7.map") // the namespace's pid, not 4242
	p := NewProcess(procRoot, 4242)
	defer p.Close()
	if err := p.Update(); err != nil || p.Symbols.Len() != 0 {
		t.Fatalf("no file yet: err %v, %d symbols", err, p.Symbols.Len())
	}
	appendFile(t, path, "1000 10 first\n2000 10 sec")
	if err := p.Update(); err != nil {
		t.Fatal(err)
	}
	if name(p, 0x1000) != "first" || name(p, 0x2000) != "" {
		t.Fatalf("after the first write: %q %q", name(p, 0x1000), name(p, 0x2000))
	}
	appendFile(t, path, "ond\n3000 10 third\n")
	if err := os.Remove(path); err != nil { // the runtime exits and cleans up
		t.Fatal(err)
	}
	if err := p.Update(); err != nil {
		t.Fatal(err)
	}
	if name(p, 0x2000) != "second" || name(p, 0x3000) != "third" {
		t.Fatalf("after the file was removed: %q %q", name(p, 0x2000), name(p, 0x3000))
	}
}

func TestProcessPerfMapRewritten(t *testing.T) {
	procRoot, tmp := fakeProc(t)
	path := filepath.Join(tmp, "perf-7.map")
	appendFile(t, path, "1000 10 a\n")
	p := NewProcess(procRoot, 4242)
	defer p.Close()
	p.Update()
	// jcmd Compiler.perfmap writes the whole file again, in place.
	if err := os.WriteFile(path, []byte("1000 20 aa\n5000 10 b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p.Update()
	if name(p, 0x1010) != "aa" || name(p, 0x5000) != "b" {
		t.Fatalf("after the rewrite: %q %q", name(p, 0x1010), name(p, 0x5000))
	}
	// Replaced by another file.
	os.Remove(path)
	appendFile(t, path, "6000 10 c\n")
	p.Update()
	if name(p, 0x6000) != "c" {
		t.Fatalf("after the replacement: %q", name(p, 0x6000))
	}
}

func TestProcessJITDump(t *testing.T) {
	procRoot, tmp := fakeProc(t)
	path := filepath.Join(tmp, "jit-7.dump")
	b := sampleDump(binary.LittleEndian)
	if err := os.WriteFile(path, b[:len(b)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	if !IsJITDump(path) || IsJITDump("/tmp/jit-x.dump") || IsJITDump("/usr/lib/libjit-1.so") {
		t.Fatal("IsJITDump")
	}
	p := NewProcess(procRoot, 4242)
	defer p.Close()
	if err := p.AddDump(path, "/tmp/jit-7.dump"); err != nil {
		t.Fatal(err)
	}
	if err := p.Update(); err != nil {
		t.Fatal(err)
	}
	appendFile(t, path, string(b[len(b)/2:]))
	if err := p.Update(); err != nil {
		t.Fatal(err)
	}
	if name(p, 0x5000) != "JS:*hotLoop" || name(p, 0x7000) != "Builtin:Call" {
		t.Fatalf("jitdump symbols: %q %q", name(p, 0x5000), name(p, 0x7000))
	}
	if n, err := p.Malformed(); n != 0 {
		t.Fatalf("%d malformed: %v", n, err)
	}
}
