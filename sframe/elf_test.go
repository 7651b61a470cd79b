package sframe

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"testing"
)

// TestSegmentFallback reads a fixture whose section headers were removed:
// the table comes from PT_GNU_SFRAME, which GNU ld made longer than the
// section (it also covers the notes after it), and must equal the one
// read from the section.
func TestSegmentFallback(t *testing.T) {
	const bin = "../testdata/sframe/chain-amd64-v3"
	raw := readFile(t, bin)
	// e_shoff (0x28), e_shnum (0x3c), e_shstrndx (0x3e) of an ELF64 LE file.
	binary.LittleEndian.PutUint64(raw[0x28:], 0)
	binary.LittleEndian.PutUint16(raw[0x3c:], 0)
	binary.LittleEndian.PutUint16(raw[0x3e:], 0)
	f, err := elf.NewFile(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Sections) != 0 {
		t.Fatalf("%d sections left", len(f.Sections))
	}
	fromSeg, err := FromELF(f)
	if err != nil {
		t.Fatal(err)
	}
	fromSec, err := Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	var a, b bytes.Buffer
	fromSeg.WriteText(&a)
	fromSec.WriteText(&b)
	if a.String() != b.String() || fromSeg.Addr != fromSec.Addr {
		t.Errorf("segment gives\n%s\nsection gives\n%s", a.String(), b.String())
	}
}

func TestFromELFErrors(t *testing.T) {
	if _, err := Open("../scripts/none"); err == nil {
		t.Error("no error for a missing file")
	}
	// The Go test binary has no SFrame.
	f, err := elf.Open("/proc/self/exe")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	if _, err := FromELF(f); !errors.Is(err, ErrNoSFrame) {
		t.Errorf("FromELF(test binary) = %v, want ErrNoSFrame", err)
	}
}
