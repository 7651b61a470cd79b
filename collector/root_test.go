package collector

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/sprof/sprof/internal/elfx"
	"github.com/sprof/sprof/internal/testenv"
	"github.com/sprof/sprof/unwind"
)

// TestAtRootLoaderEntry: glibc's ld.so starts every dynamically linked
// process in entry code without CFI. A stack whose last return address is
// there (after the entry code's first call, found in binutils'
// disassembly) ends at the process's root; one in the function after the
// entry code (where binutils' objdump shows the next FDE) does not.
func TestAtRootLoaderEntry(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the disassembly oracle reads x86-64 calls")
	}
	const ldso = "/lib64/ld-linux-x86-64.so.2"
	objdump := testenv.RequireTool(t, "objdump")
	f, err := elf.Open(ldso)
	if err != nil {
		t.Skipf("no glibc loader: %v", err)
	}
	defer f.Close()
	entry := f.Entry

	// objdump: the FDEs' ranges; none may cover the entry point. (readelf
	// prints the same, and exits 1 on Debian's ld.so.)
	frames, err := exec.Command(objdump, "--dwarf=frames", ldso).Output()
	if err != nil {
		t.Fatal(err)
	}
	next := ^uint64(0)
	for _, line := range strings.Split(string(frames), "\n") {
		_, r, ok := strings.Cut(line, " FDE ")
		if !ok {
			continue
		}
		_, r, _ = strings.Cut(r, "pc=")
		lo, hi, _ := strings.Cut(strings.TrimSpace(r), "..")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("objdump line %q", line)
		}
		if start <= entry && entry < end {
			t.Skipf("%s: an FDE covers the entry point %#x: the CFI decides", ldso, entry)
		}
		if start > entry && start < next {
			next = start
		}
	}
	// objdump: the address after the entry code's first call.
	dis, err := exec.Command(objdump, "-d", fmt.Sprintf("--start-address=%#x", entry), fmt.Sprintf("--stop-address=%#x", next), ldso).Output()
	if err != nil {
		t.Fatal(err)
	}
	var afterCall uint64
	sawCall := false
	for sc := bufio.NewScanner(bytes.NewReader(dis)); sc.Scan(); {
		addr, rest, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":\t")
		a, err := strconv.ParseUint(addr, 16, 64)
		if !ok || err != nil {
			continue
		}
		if sawCall {
			afterCall = a
			break
		}
		sawCall = strings.Contains(rest, "call")
	}
	if afterCall == 0 {
		t.Fatalf("no call in the entry code of %s at %#x:\n%s", ldso, entry, dis)
	}

	r, err := os.Open(ldso)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	table, kind, _, err := unwind.BuildTable(r, ldso, false)
	if err != nil {
		t.Fatal(err)
	}
	u := newUnwinder(newFiles("/proc"), 0, false, true, nil)
	const base = 0x7f20_0000_0000
	set := &mapSet{}
	set.insert(mapping{start: base, limit: base + 0x100000, bin: &binaryFile{name: ldso, buildID: "ld"}})
	in := u.info(set.find(base))
	in.classified, in.readable, in.built, in.table, in.kind, in.entry = true, true, true, table, kind, entry
	in.loads = elfx.LoadSegments(f)
	leaf := base + next + 4
	for _, tc := range []struct {
		what string
		user []uint64
		want bool
	}{
		{"return address after the entry code's first call", []uint64{leaf, base + afterCall}, true},
		{"the sampled PC at the entry point", []uint64{base + entry}, true},
		{"return address in the next function", []uint64{leaf, base + next + 8}, false},
		{"return address before the entry point", []uint64{leaf, base + entry}, false},
	} {
		if got := u.atRoot(set, tc.user); got != tc.want {
			t.Errorf("%s (%#x): at the root %v, want %v", tc.what, tc.user[len(tc.user)-1]-base, got, tc.want)
		}
	}
}
