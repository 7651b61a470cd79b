package sframe

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
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

// TestFromELFChecksTheFile: the section's ABI must match the ELF machine,
// and FDEs outside every executable PT_LOAD are left out, each error
// naming its FDE.
func TestFromELFChecksTheFile(t *testing.T) {
	const bin = "../testdata/sframe/asm-amd64-v1"
	raw := readFile(t, bin)

	wrongMachine := append([]byte(nil), raw...)
	binary.LittleEndian.PutUint16(wrongMachine[0x12:], uint16(elf.EM_AARCH64))
	if _, err := Read(bytes.NewReader(wrongMachine)); err == nil || !strings.Contains(err.Error(), "SFRAME_ABI_AMD64_ENDIAN_LITTLE section in an ELF file for EM_AARCH64") {
		t.Errorf("amd64 section in an aarch64 file: %v", err)
	}

	// Clear PF_X on every program header.
	noExec := append([]byte(nil), raw...)
	phoff := binary.LittleEndian.Uint64(noExec[0x20:])
	phentsize := uint64(binary.LittleEndian.Uint16(noExec[0x36:]))
	for i := range uint64(binary.LittleEndian.Uint16(noExec[0x38:])) {
		flags := noExec[phoff+i*phentsize+4:]
		binary.LittleEndian.PutUint32(flags, binary.LittleEndian.Uint32(flags)&^uint32(elf.PF_X))
	}
	tab, err := Read(bytes.NewReader(noExec))
	if err != nil {
		t.Fatal(err)
	}
	var fe *FormatError
	if len(tab.FDEs()) != 0 || len(tab.Errors) != 2 || !errors.As(tab.Errors[1], &fe) || fe.Field != "fde[1].func_start" || !strings.Contains(fe.Msg, "not in an executable segment") {
		t.Errorf("%d FDEs, errors %v; want both left out, outside executable segments", len(tab.FDEs()), tab.Errors)
	}
	if _, ok := tab.Lookup(0x401004); ok {
		t.Errorf("a rule for code outside executable segments")
	}
}

// TestReadNamesTheELFDefect: debug/elf's bare io.EOF and its magic-number
// message are put in words that say what is wrong with the file and where,
// and stay matchable with errors.Is and errors.As.
func TestReadNamesTheELFDefect(t *testing.T) {
	raw := readFile(t, "../testdata/sframe/asm-amd64-v2")
	shoff := binary.LittleEndian.Uint64(raw[0x28:])
	cases := []struct {
		name string
		data []byte
		want string
		is   error
	}{
		{"section headers cut off", raw[:3000], fmt.Sprintf("truncated ELF file: reading section headers at offset %#x (%d bytes)", shoff, 64*binary.LittleEndian.Uint16(raw[0x3c:])), io.EOF},
		{"header cut off", raw[:40], "truncated ELF file: reading ELF header at offset 0x0 (64 bytes)", io.EOF},
		{"not ELF", []byte(`{"version": 2}` + strings.Repeat(" ", 64)), "not an ELF file: bad magic number", nil},
		{"empty", nil, "not an ELF file", io.EOF},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Read(bytes.NewReader(c.data))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Read = %v, want an error containing %q", err, c.want)
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Errorf("errors.Is(%v, %v) = false", err, c.is)
			}
			var fe *elf.FormatError
			if c.is == nil && !errors.As(err, &fe) {
				t.Errorf("%v does not wrap debug/elf's FormatError", err)
			}
		})
	}
}

// TestOpenRawSection reads a fixture's .sframe section cut out of the file,
// as objcopy --dump-section writes it: the table must be the one Open reads
// from the ELF file.
func TestOpenRawSection(t *testing.T) {
	const bin = "../testdata/sframe/chain-amd64-v3"
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sec := f.Section(".sframe")
	data, err := sec.Data()
	if err != nil {
		t.Fatal(err)
	}
	raw := filepath.Join(t.TempDir(), "sframe")
	if err := os.WriteFile(raw, data, 0o644); err != nil {
		t.Fatal(err)
	}
	fromELF, err := Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	fromRaw, err := OpenAt(raw, sec.Addr)
	if err != nil {
		t.Fatal(err)
	}
	var a, b bytes.Buffer
	fromELF.WriteText(&a)
	fromRaw.WriteText(&b)
	if a.String() != b.String() {
		t.Errorf("the ELF file gives\n%s\nthe raw section gives\n%s", a.String(), b.String())
	}
}
