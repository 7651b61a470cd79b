package sframe

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/hex"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// stackDump is a stack dump written by a fixture from its innermost
// function (scripts/sframe/chain.c): its registers, the return addresses
// the compiler knows, and a copy of its stack.
type stackDump struct {
	arch   Arch
	ehdr   uint64 // runtime address of the ELF header
	regs   Regs
	frames []uint64
	stack  Snapshot
}

func readStackDump(t testing.TB, path string) *stackDump {
	t.Helper()
	d := &stackDump{}
	sc := bufio.NewScanner(bytes.NewReader(readFile(t, path)))
	num := func(s string) uint64 {
		v, err := strconv.ParseUint(s, 0, 64)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return v
	}
	var stackLen uint64
	var hexBytes strings.Builder
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 0:
		case f[0] == "sframe-stack-dump":
		case f[0] == "arch" && f[1] == "amd64":
			d.arch = ArchAMD64
		case f[0] == "arch" && f[1] == "arm64":
			d.arch = ArchARM64
		case f[0] == "ehdr":
			d.ehdr = num(f[1])
		case f[0] == "pc":
			d.regs.PC = num(f[1])
		case f[0] == "sp":
			d.regs.SP = num(f[1])
		case f[0] == "fp":
			d.regs.FP = num(f[1])
		case f[0] == "lr":
			d.regs.LR = num(f[1])
		case f[0] == "frames":
			for _, s := range f[1:] {
				d.frames = append(d.frames, num(s))
			}
		case f[0] == "stack":
			d.stack.Base, stackLen = num(f[1]), num(f[2])
		default:
			hexBytes.WriteString(f[0])
		}
	}
	data, err := hex.DecodeString(hexBytes.String())
	if err != nil || uint64(len(data)) != stackLen || d.arch == 0 || len(d.frames) < 5 {
		t.Fatalf("%s: malformed dump (err %v, %d of %d stack bytes, %d frames)", path, err, len(data), stackLen, len(d.frames))
	}
	d.stack.Data = data
	return d
}

// oneBinary resolves the PCs of one loaded binary.
type oneBinary struct {
	start, end uint64
	m          Mapping
}

func (b *oneBinary) Resolve(pc uint64) (Mapping, bool) {
	if pc < b.start || pc >= b.end {
		return Mapping{}, false
	}
	return b.m, true
}

// loadFixture opens a fixture binary and its stack dump, and returns an
// unwinder that knows the binary at the address it had when it was run.
func loadFixture(t testing.TB, bin string) (*Unwinder, *stackDump) {
	t.Helper()
	tab, err := Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	d := readStackDump(t, bin+".stack")
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	var lo, hi uint64 = ^uint64(0), 0
	bias := uint64(0)
	for _, p := range ef.Progs {
		if p.Type != elf.PT_LOAD {
			continue
		}
		if p.Off == 0 {
			bias = d.ehdr - p.Vaddr
		}
		lo, hi = min(lo, p.Vaddr), max(hi, p.Vaddr+p.Memsz)
	}
	res := &oneBinary{start: lo + bias, end: hi + bias, m: Mapping{Table: tab, Bias: bias}}
	return &Unwinder{Arch: d.arch, Resolver: res}, d
}

func stackDumps(t testing.TB) []string {
	t.Helper()
	dumps, err := filepath.Glob("../testdata/sframe/*.stack")
	if err != nil {
		t.Fatal(err)
	}
	if len(dumps) < 6 {
		t.Fatalf("found %d stack dumps, want 6 (v1, v2, v3 on amd64 and arm64)", len(dumps))
	}
	for i := range dumps {
		dumps[i] = strings.TrimSuffix(dumps[i], ".stack")
	}
	return dumps
}

// TestUnwindStackDumps unwinds the stacks the fixtures captured and wants
// exactly the return addresses the compiler reported, ending at main's
// return into libc, which has no mapping here.
func TestUnwindStackDumps(t *testing.T) {
	for _, bin := range stackDumps(t) {
		t.Run(filepath.Base(bin), func(t *testing.T) {
			u, d := loadFixture(t, bin)
			out := make([]uint64, 64)
			n, stop := u.Unwind(d.regs, &d.stack, out)
			if !slices.Equal(out[:n], d.frames) || stop != StopNoMapping {
				t.Errorf("unwound %#x (%v),\nwant %#x (%v)", out[:n], stop, d.frames, StopNoMapping)
			}
		})
	}
}

// TestUnwindAllocs checks that unwinding allocates nothing.
func TestUnwindAllocs(t *testing.T) {
	for _, bin := range stackDumps(t) {
		u, d := loadFixture(t, bin)
		out := make([]uint64, 64)
		allocs := testing.AllocsPerRun(100, func() { u.Unwind(d.regs, &d.stack, out) })
		if allocs != 0 {
			t.Errorf("%s: %v allocations per unwind, want 0", filepath.Base(bin), allocs)
		}
	}
}
