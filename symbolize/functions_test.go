package symbolize

import (
	"debug/elf"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sprof/sprof/stacks"

	"github.com/sprof/sprof/internal/elfx"
)

// fdeLine is an FDE as `readelf --debug-dump=frames` prints it.
var fdeLine = regexp.MustCompile(`FDE cie=[0-9a-f]+ pc=([0-9a-f]+)\.\.([0-9a-f]+)`)

// TestUnnamedFunctions: in liblzma, which has no .symtab, an address that
// no exported symbol covers is named after the start of the FDE around
// it, for every FDE readelf lists: the same name at its first byte, in
// its middle and at its last byte.
func TestUnnamedFunctions(t *testing.T) {
	needTool(t, "readelf")
	const lib = "/usr/lib/x86_64-linux-gnu/liblzma.so.5.4.1"
	f, err := elf.Open(lib)
	if err != nil {
		t.Skipf("%s: %v", lib, err)
	}
	loads := elfx.LoadSegments(f)
	f.Close()
	s := NewELF(Options{})
	bin := Binary{Path: lib, Name: lib}
	unnamed := 0
	for _, m := range fdeLine.FindAllStringSubmatch(run(t, "", "readelf", "--debug-dump=frames", lib), -1) {
		lo, _ := strconv.ParseUint(m[1], 16, 64)
		hi, _ := strconv.ParseUint(m[2], 16, 64)
		startOff, ok := loads.FileOffset(lo)
		if !ok || hi <= lo {
			t.Fatalf("FDE %#x..%#x outside the executable segments", lo, hi)
		}
		want := fmt.Sprintf("liblzma.so.5.4.1+%#x", startOff)
		var names []string
		for _, pc := range []uint64{lo, lo + (hi-lo)/2, hi - 1} {
			off, _ := loads.FileOffset(pc)
			fr, err := s.Symbolize(nil, bin, off)
			if err != nil || len(fr) != 1 {
				t.Fatalf("%#x: frames %v, err %v", pc, fr, err)
			}
			names = append(names, fr[0].Function)
		}
		if names[0] != want {
			if strings.HasPrefix(names[0], "liblzma.so.5.4.1+") {
				t.Errorf("FDE %#x..%#x: first byte named %s, want %s", lo, hi, names[0], want)
			}
			continue // an exported function, named by .dynsym
		}
		unnamed++
		if names[1] != want || names[2] != want {
			t.Errorf("FDE %#x..%#x: named %q, want %s throughout", lo, hi, names, want)
		}
	}
	if unnamed < 10 {
		t.Fatalf("only %d FDEs without a symbol: the test proves little", unnamed)
	}
	t.Logf("%d FDEs without a symbol named by their start", unnamed)
	// No FDE covers the ELF header: nothing to name there.
	if fr, _ := s.Symbolize([]stacks.Frame{}, bin, 0x10); len(fr) != 0 {
		t.Errorf("offset 0x10 named %v", fr)
	}
}
