package elfx

import (
	"bytes"
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// TestReadContainsPanics: a panic while reading becomes an error naming
// the file.
func TestReadContainsPanics(t *testing.T) {
	self, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	err = Read(self, "victim", func(*elf.File) error { panic("index out of range") })
	if err == nil || !strings.Contains(err.Error(), "victim") || !strings.Contains(err.Error(), "index out of range") {
		t.Errorf("error %v, want one naming the file and the panic", err)
	}
	want := errors.New("fn's")
	if err := Read(self, "self", func(*elf.File) error { return want }); err != want {
		t.Errorf("error %v, want fn's own", err)
	}
	if err := Read(bytes.NewReader([]byte("#!/bin/sh\n")), "script", func(*elf.File) error { return nil }); err == nil || !strings.HasPrefix(err.Error(), "script: ") {
		t.Errorf("a script: error %v, want one naming it", err)
	}
}

// TestIsGo: the test binary is a Go program, /bin/sh is not.
func TestIsGo(t *testing.T) {
	for path, want := range map[string]bool{os.Args[0]: true, "/bin/sh": false} {
		f, err := elf.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := IsGo(f); got != want {
			t.Errorf("IsGo(%s) = %v", path, got)
		}
		f.Close()
	}
}

// TestSegmentsAgainstReadelf: Vaddr and Bias agree with readelf's program
// headers for libc: every offset in an executable segment maps to its
// address, and a mapping of that segment from its page has the bias that
// takes the runtime address of the segment's start to its Vaddr.
func TestSegmentsAgainstReadelf(t *testing.T) {
	const lib = "/lib/x86_64-linux-gnu/libc.so.6"
	out, err := exec.Command("readelf", "-lW", lib).Output()
	if err != nil {
		t.Skipf("readelf -lW %s: %v", lib, err)
	}
	f, err := elf.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ss := LoadSegments(f)
	checked := 0
	for line := range strings.Lines(string(out)) {
		fs := strings.Fields(line)
		if len(fs) < 8 || fs[0] != "LOAD" {
			continue
		}
		num := func(s string) uint64 {
			v, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
			if err != nil {
				t.Fatalf("readelf field %q: %v", s, err)
			}
			return v
		}
		off, vaddr, filesz := num(fs[1]), num(fs[2]), num(fs[4])
		if !strings.Contains(strings.Join(fs[6:len(fs)-1], ""), "E") {
			continue
		}
		if got, ok := ss.Vaddr(off + filesz/2); !ok || got != vaddr+filesz/2 {
			t.Errorf("Vaddr(%#x) = %#x, %v; readelf says %#x", off+filesz/2, got, ok, vaddr+filesz/2)
		}
		const start = 0x7f00_0000_0000
		page := off &^ 0xfff
		if b := ss.Bias(start, page); start+off-page-b != vaddr {
			t.Errorf("a mapping at %#x from offset %#x: bias %#x takes the segment's start to %#x; readelf says %#x", uint64(start), page, b, start+off-page-b, vaddr)
		}
		checked++
	}
	if checked == 0 {
		t.Fatalf("no executable LOAD segment in readelf's answer:\n%s", out)
	}
}
