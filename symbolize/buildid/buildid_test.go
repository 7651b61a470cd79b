package buildid

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sprof/sprof/internal/testenv"
)

// TestFileMatchesReadelf checks real binaries of this machine against
// binutils' readelf, which no one here wrote. The Go binary matters most: the
// Go linker puts .note.gnu.build-id in no PT_NOTE segment, so only the
// section headers lead to it.
func TestFileMatchesReadelf(t *testing.T) {
	testenv.RequireTool(t, "readelf")
	re := regexp.MustCompile(`Build ID: ([0-9a-f]+)`)
	for _, path := range []string{"/bin/ls", "/lib/x86_64-linux-gnu/libc.so.6", "/usr/bin/readelf", goBinary(t)} {
		if _, err := os.Stat(path); err != nil {
			continue
		}
		out, err := exec.Command("readelf", "-n", path).Output()
		if err != nil {
			t.Fatalf("readelf -n %s: %v", path, err)
		}
		m := re.FindSubmatch(out)
		if m == nil {
			t.Fatalf("readelf shows no build ID for %s", path)
		}
		got, err := File(path)
		if err != nil {
			t.Fatalf("File(%s): %v", path, err)
		}
		if got != string(m[1]) {
			t.Errorf("File(%s) = %s, readelf says %s", path, got, m[1])
		}
	}
}

// goBinary builds a small Go program; go build gives it a GNU build ID
// derived from its Go build ID.
func goBinary(t *testing.T) string {
	goTool := testenv.RequireTool(t, "go")
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte("package main\n\nfunc main() { println(\"hi\") }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "hello")
	cmd := exec.Command(goTool, "build", "-o", bin, src)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GO111MODULE=off", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// elf64 builds a minimal little-endian ELF64 file with one PT_NOTE segment
// holding notes.
func elf64(notes []byte) []byte {
	var b bytes.Buffer
	hdr := make([]byte, elfHeader64)
	copy(hdr, "\x7fELF\x02\x01\x01")
	le := binary.LittleEndian
	le.PutUint64(hdr[32:], elfHeader64) // e_phoff
	le.PutUint16(hdr[54:], phdrSize64)  // e_phentsize
	le.PutUint16(hdr[56:], 1)           // e_phnum
	b.Write(hdr)
	ph := make([]byte, phdrSize64)
	le.PutUint32(ph, ptNote)
	le.PutUint64(ph[8:], elfHeader64+phdrSize64)
	le.PutUint64(ph[32:], uint64(len(notes)))
	b.Write(ph)
	b.Write(notes)
	return b.Bytes()
}

// elf64Sections builds a minimal little-endian ELF64 file laid out as the Go
// linker does: its one PT_NOTE segment holds segNotes, and a second SHT_NOTE
// section, which no segment covers, holds secNotes.
func elf64Sections(segNotes, secNotes []byte) []byte {
	b := elf64(segNotes)
	le := binary.LittleEndian
	secOff := len(b)
	b = append(b, secNotes...)
	le.PutUint64(b[40:], uint64(len(b))) // e_shoff
	le.PutUint16(b[58:], shdrSize64)     // e_shentsize
	le.PutUint16(b[60:], 3)              // e_shnum
	sh := make([]byte, 3*shdrSize64)     // section 0 is SHN_UNDEF
	for i, n := range []struct{ off, size int }{{elfHeader64 + phdrSize64, len(segNotes)}, {secOff, len(secNotes)}} {
		e := sh[(i+1)*shdrSize64:]
		le.PutUint32(e[4:], shtNote)
		le.PutUint64(e[24:], uint64(n.off))
		le.PutUint64(e[32:], uint64(n.size))
	}
	return append(b, sh...)
}

func note(name string, typ uint32, desc []byte) []byte {
	var b bytes.Buffer
	le := binary.LittleEndian
	var h [12]byte
	le.PutUint32(h[0:], uint32(len(name)))
	le.PutUint32(h[4:], uint32(len(desc)))
	le.PutUint32(h[8:], typ)
	b.Write(h[:])
	b.WriteString(name)
	b.Write(make([]byte, align4(len(name))-len(name)))
	b.Write(desc)
	b.Write(make([]byte, align4(len(desc))-len(desc)))
	return b.Bytes()
}

func TestRead(t *testing.T) {
	id := []byte{0xde, 0xad, 0xbe, 0xef, 0x01}
	goNote := note("Go\x00\x00", 4, []byte("go-build-id"))
	tests := []struct {
		name    string
		file    []byte
		want    string
		wantErr string
	}{
		{"gnu note", elf64(note("GNU\x00", ntGNUBuildID, id)), "deadbeef01", ""},
		{"after another note", elf64(append(goNote, note("GNU\x00", ntGNUBuildID, id)...)), "deadbeef01", ""},
		{"none", elf64(goNote), "", ErrNotFound.Error()},
		{"not elf", []byte("#!/bin/sh\necho hello world, this is long enough\n" + strings.Repeat(" ", 64)), "", "e_ident[EI_MAG]"},
		{"short", []byte("\x7fELF"), "", "read ELF header"},
		{"desc past end", elf64(note("GNU\x00", ntGNUBuildID, id)[:14]), "", ""},
		{"huge descsz", func() []byte {
			n := note("GNU\x00", ntGNUBuildID, id)
			binary.LittleEndian.PutUint32(n[4:], 0xffffffff)
			return elf64(n)
		}(), "", "n_namesz/n_descsz"},
		{"empty id", elf64(note("GNU\x00", ntGNUBuildID, nil)), "", "build ID n_descsz"},
		{"section only", elf64Sections(goNote, note("GNU\x00", ntGNUBuildID, id)), "deadbeef01", ""},
		{"no note section", elf64Sections(goNote, goNote), "", ErrNotFound.Error()},
		{"section entsize", func() []byte {
			b := elf64Sections(goNote, note("GNU\x00", ntGNUBuildID, id))
			binary.LittleEndian.PutUint16(b[58:], 8)
			return b
		}(), "", "e_shentsize at offset 0x3a"},
		{"section size", func() []byte {
			b := elf64Sections(goNote, note("GNU\x00", ntGNUBuildID, id))
			binary.LittleEndian.PutUint64(b[len(b)-shdrSize64+32:], 1<<40)
			return b
		}(), "", "sh_size"},
		{"section past end", func() []byte {
			b := elf64Sections(goNote, note("GNU\x00", ntGNUBuildID, id))
			binary.LittleEndian.PutUint64(b[40:], uint64(len(b)))
			return b
		}(), "", "section header at offset"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Read(bytes.NewReader(tt.file))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Read = %q, %v; want error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if tt.want == "" {
				if err == nil {
					t.Fatalf("Read = %q, want an error", got)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Read = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestFormatErrorNamesOffset(t *testing.T) {
	n := note("GNU\x00", ntGNUBuildID, []byte{1})
	binary.LittleEndian.PutUint32(n[4:], 1000)
	_, err := Read(bytes.NewReader(elf64(n)))
	var fe *FormatError
	if !errors.As(err, &fe) || fe.Offset != elfHeader64+phdrSize64 {
		t.Fatalf("err = %v; want a FormatError at offset %#x", err, elfHeader64+phdrSize64)
	}
}

func BenchmarkFile(b *testing.B) {
	const path = "/bin/ls"
	if _, err := os.Stat(path); err != nil {
		b.Skip(path, "missing")
	}
	for b.Loop() {
		if _, err := File(path); err != nil {
			b.Fatal(err)
		}
	}
}
