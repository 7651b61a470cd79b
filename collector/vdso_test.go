package collector

import (
	"bytes"
	"cmp"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sprof/sprof/internal/testenv"
	"github.com/sprof/sprof/symbolize"
)

// vdsoImage returns the bytes of sprof's copy of its vDSO, written to a
// file for the oracle.
func vdsoImage(t *testing.T, c *Collector) (img []byte, path string) {
	t.Helper()
	vd := c.table.files.vdso
	if vd == nil {
		_, _, err := openVDSO()
		t.Fatalf("sprof's vDSO was not read: %v", err)
	}
	img, err := os.ReadFile(vd.binary().Path)
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(t.TempDir(), "vdso.so")
	if err := os.WriteFile(path, img, 0o644); err != nil {
		t.Fatal(err)
	}
	return img, path
}

// dynFunc is a function of the vDSO as readelf lists it.
type dynFunc struct {
	value, size uint64
	name        string
}

var (
	dynSymLine  = regexp.MustCompile(`^\s*\d+:\s+([0-9a-f]+)\s+(\d+)\s+FUNC\s+\S+\s+\S+\s+\S+\s+(\S+)`)
	buildIDLine = regexp.MustCompile(`Build ID: ([0-9a-f]+)`)
)

// readelfFuncs runs readelf on the image: its functions from .dynsym, and
// its build ID.
func readelfFuncs(t *testing.T, path string) ([]dynFunc, string) {
	t.Helper()
	readelf := testenv.RequireTool(t, "readelf")
	out, err := exec.Command(readelf, "-W", "--dyn-syms", "--notes", path).CombinedOutput()
	if err != nil {
		t.Fatalf("readelf: %v\n%s", err, out)
	}
	var funcs []dynFunc
	var id string
	for line := range strings.Lines(string(out)) {
		if m := dynSymLine.FindStringSubmatch(line); m != nil {
			v, _ := strconv.ParseUint(m[1], 16, 64)
			n, _ := strconv.ParseUint(m[2], 10, 64)
			name, _, _ := strings.Cut(m[3], "@")
			funcs = append(funcs, dynFunc{v, n, name})
		}
		if m := buildIDLine.FindStringSubmatch(line); m != nil {
			id = m[1]
		}
	}
	if len(funcs) == 0 || id == "" {
		t.Fatalf("readelf found %d functions and build ID %q in the vDSO:\n%s", len(funcs), id, out)
	}
	return funcs, id
}

// fileOffset converts a virtual address of the image to its file offset.
func fileOffset(t *testing.T, img []byte, vaddr uint64) uint64 {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(img))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && vaddr >= p.Vaddr && vaddr < p.Vaddr+p.Filesz {
			return vaddr - p.Vaddr + p.Off
		}
	}
	t.Fatalf("vDSO address %#x is in no PT_LOAD segment", vaddr)
	return 0
}

// TestVDSOSymbolized: a sample in a native process's [vdso] is symbolized
// with sprof's own copy of the vDSO, through the real ELF symbolizer, to a
// function readelf lists at that address; its mapping keeps the name
// [vdso] and carries the build ID readelf reads. A compat process's [vdso],
// below 4 GiB, is another image and stays unnamed.
func TestVDSOSymbolized(t *testing.T) {
	c, err := New(Options{Frequency: 99, ProcRoot: t.TempDir(), NoSideband: true, Symbolizer: symbolize.NewELF(symbolize.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	img, path := vdsoImage(t, c)
	funcs, wantID := readelfFuncs(t, path)

	const native, compat = 0x7ffd_f000_0000, 0xf7f0_0000
	size := uint64(len(img))
	c.events = []event{
		mmapEvent(1, 42, native, native+size, 0, vdsoName, nil),
		mmapEvent(1, 43, compat, compat+size, 0, vdsoName, nil),
	}
	src := &fakeSource{}
	var want [][]string // the names readelf gives each sample's leaf
	seen := map[uint64]bool{}
	for _, f := range funcs {
		addr := f.value + f.size/2
		if f.size == 0 || seen[addr] { // clock_gettime and __vdso_clock_gettime are one
			continue
		}
		seen[addr] = true
		var names []string
		for _, g := range funcs {
			if addr >= g.value && addr < g.value+g.size {
				names = append(names, g.name)
			}
		}
		src.add(42, 5, native+fileOffset(t, img, addr))
		want = append(want, names)
	}
	src.add(43, 5, compat+fileOffset(t, img, funcs[0].value))
	if err := c.Drain(src); err != nil {
		t.Fatal(err)
	}
	p := c.Profile()
	if len(p.Samples) != len(want)+1 {
		t.Fatalf("%d samples, want %d", len(p.Samples), len(want)+1)
	}
	var clock bool
	for i, s := range p.Samples[:len(want)] {
		leaf := s.Stack[0]
		if m := leaf.Mapping; m.File != vdsoName || m.BuildID != wantID {
			t.Fatalf("leaf %#x in %q build ID %q, want [vdso] with %q", leaf.Address, m.File, m.BuildID, wantID)
		}
		if !leaf.Symbolized() || !slices.Contains(want[i], leaf.Frames[0].Function) {
			t.Errorf("[vdso]+%#x symbolized as %+v, readelf says %q", leaf.Address-native, leaf.Frames, want[i])
			continue
		}
		clock = clock || strings.Contains(leaf.Frames[0].Function, "clock_gettime")
	}
	if !clock {
		t.Errorf("no sample in clock_gettime among %d vDSO functions", len(want))
	}
	if leaf := p.Samples[len(want)].Stack[0]; leaf.Symbolized() || leaf.Mapping.BuildID != "" {
		t.Errorf("a compat process's [vdso] was taken for sprof's: %+v, build ID %q", leaf.Frames, leaf.Mapping.BuildID)
	}
	t.Logf("%d vDSO functions symbolized; build ID %s, %d bytes", len(want), wantID, size)
}

// TestVDSOSharedByProcesses checks the premise: another native process
// maps the very bytes of sprof's vDSO, and a [vdso] line of its
// /proc/PID/maps resolves to sprof's copy.
func TestVDSOSharedByProcesses(t *testing.T) {
	c := newTestCollector(t, "/proc")
	img, _ := vdsoImage(t, c)
	cmd := exec.Command(realPath(t, "/bin/sleep"), "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	pid := uint32(cmd.Process.Pid)
	var vdso *mapping
	// The child is sleep, with its own vDSO, once it has exec'd. The
	// kernel maps the vDSO after the program's segments, so a read in the
	// middle of execve may show sleep without it: read again.
	for range 200 {
		if img, err := c.table.load(pid, 0); err == nil && hasFile(img.maps, realPath(t, "/bin/sleep")) {
			for i := range img.maps.maps {
				if img.maps.maps[i].bin.name == vdsoName {
					vdso = &img.maps.maps[i]
				}
			}
			if vdso != nil {
				break
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if vdso == nil {
		t.Fatalf("no [vdso] mapping read for pid %d", pid)
	}
	if vdso.bin != c.table.files.vdso {
		t.Fatalf("the child's [vdso] at %#x-%#x is not sprof's copy", vdso.start, vdso.limit)
	}
	mem, err := os.Open(filepath.Join("/proc", strconv.Itoa(int(pid)), "mem"))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	theirs := make([]byte, vdso.limit-vdso.start)
	if _, err := mem.ReadAt(theirs, int64(vdso.start)); err != nil {
		t.Fatalf("read the child's vDSO: %v", err)
	}
	if !bytes.Equal(theirs, img) {
		t.Fatal("the child's vDSO differs from sprof's")
	}
}

// TestVDSODebugFile: a function the vDSO does not export is named from
// the kernel's vDSO debug file, found by the image's build ID like any
// binary's. The debug file here is the image with a .symtab added by
// objcopy, naming a function where .dynsym names none.
func TestVDSODebugFile(t *testing.T) {
	objcopy := testenv.RequireTool(t, "objcopy")
	debugDir := t.TempDir()
	c, err := New(Options{Frequency: 99, ProcRoot: t.TempDir(), NoSideband: true,
		Symbolizer: symbolize.NewELF(symbolize.Options{DebugDirs: []string{debugDir}})})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	img, path := vdsoImage(t, c)
	funcs, id := readelfFuncs(t, path)
	f, err := elf.NewFile(bytes.NewReader(img))
	if err != nil {
		t.Fatal(err)
	}
	text := f.Section(".text")
	if text == nil {
		t.Fatal("the vDSO has no .text")
	}
	// The first address of .text that no exported function covers.
	addr := text.Addr
	slices.SortFunc(funcs, func(a, b dynFunc) int { return cmp.Compare(a.value, b.value) })
	for _, g := range funcs {
		if addr >= g.value && addr < g.value+g.size {
			addr = g.value + g.size
		}
	}
	if addr >= text.Addr+text.Size {
		t.Skipf("every byte of this vDSO's .text is in an exported function")
	}
	dbg := filepath.Join(debugDir, ".build-id", id[:2], id[2:]+".debug")
	if err := os.MkdirAll(filepath.Dir(dbg), 0o755); err != nil {
		t.Fatal(err)
	}
	sym := fmt.Sprintf("hidden_clock_read=.text:%#x,function,local", addr-text.Addr)
	if out, err := exec.Command(objcopy, "--add-symbol", sym, path, dbg).CombinedOutput(); err != nil {
		t.Fatalf("objcopy: %v\n%s", err, out)
	}
	const native = 0x7ffd_f000_0000
	c.events = []event{mmapEvent(1, 42, native, native+uint64(len(img)), 0, vdsoName, nil)}
	src := &fakeSource{}
	src.add(42, 5, native+fileOffset(t, img, addr))
	if err := c.Drain(src); err != nil {
		t.Fatal(err)
	}
	leaf := c.Profile().Samples[0].Stack[0]
	if !leaf.Symbolized() || leaf.Frames[0].Function != "hidden_clock_read" {
		t.Fatalf("[vdso]+%#x symbolized as %+v, want hidden_clock_read from the debug file", addr, leaf.Frames)
	}
}
