package symbolize

import (
	"bufio"
	"bytes"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sprof/sprof/internal/testenv"
)

// Helpers that ask tools no one here wrote — binutils' readelf, nm,
// c++filt and addr2line, and the Go toolchain — what a binary says.

const fixtures = "../testdata/symbolize"

// needTool skips when a tool is missing, except under CI=true, where
// `make test` has installed it and its absence is a failure.
func needTool(t testing.TB, name string) {
	t.Helper()
	testenv.RequireTool(t, name)
}

func run(t testing.TB, stdin string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// load is a PT_LOAD program header as `readelf -lW` prints it.
type load struct {
	off, vaddr, filesz uint64
	exec               bool
}

var loadRow = regexp.MustCompile(`^\s*LOAD\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+0x[0-9a-f]+\s+0x([0-9a-f]+)\s+0x[0-9a-f]+\s+([RWE ]+?)\s+0x`)

func readelfLoads(t testing.TB, path string) []load {
	t.Helper()
	var loads []load
	for _, line := range strings.Split(run(t, "", "readelf", "-lW", path), "\n") {
		m := loadRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		off, _ := strconv.ParseUint(m[1], 16, 64)
		vaddr, _ := strconv.ParseUint(m[2], 16, 64)
		filesz, _ := strconv.ParseUint(m[3], 16, 64)
		loads = append(loads, load{off, vaddr, filesz, strings.Contains(m[4], "E")})
	}
	if len(loads) == 0 {
		t.Fatalf("readelf shows no PT_LOAD in %s", path)
	}
	return loads
}

// fileOffset converts an address in an executable segment to the file
// offset a profiler sees (pc - mapping start + mapping offset).
func fileOffset(loads []load, addr uint64) (uint64, bool) {
	for _, l := range loads {
		if l.exec && addr >= l.vaddr && addr-l.vaddr < l.filesz {
			return addr - l.vaddr + l.off, true
		}
	}
	return 0, false
}

// nmSym is a defined code symbol as nm lists it, with its name demangled
// by c++filt.
type nmSym struct {
	addr, size uint64
	raw, name  string
}

func nmCode(t testing.TB, path string) []nmSym {
	t.Helper()
	var syms []nmSym
	var raws []string
	for _, line := range strings.Split(run(t, "", "nm", "-n", "-S", "--defined-only", path), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		var s nmSym
		s.addr, _ = strconv.ParseUint(f[0], 16, 64)
		typ, name := f[len(f)-2], f[len(f)-1]
		if len(f) == 4 {
			s.size, _ = strconv.ParseUint(f[1], 16, 64)
		}
		if !strings.ContainsAny(typ, "TtWwi") || strings.HasPrefix(name, ".L") || strings.HasPrefix(name, "$") {
			continue
		}
		// nm shows symbol versions (memcpy@@GLIBC_2.14); they are not
		// part of the name.
		if i := strings.IndexByte(name, '@'); i > 0 {
			name = name[:i]
		}
		s.raw = name
		syms = append(syms, s)
		raws = append(raws, name)
	}
	names := strings.Split(strings.TrimSuffix(run(t, strings.Join(raws, "\n")+"\n", "c++filt"), "\n"), "\n")
	if len(names) != len(syms) {
		t.Fatalf("c++filt returned %d names for %d", len(names), len(syms))
	}
	for i := range syms {
		syms[i].name = names[i]
	}
	return syms
}

// a2lFrame is one frame of `addr2line -f -i -C` output.
type a2lFrame struct {
	function, file string
	line           int
}

var discriminator = regexp.MustCompile(` \(discriminator \d+\)$`)

// addr2line returns, per address, the inline frames innermost first, as
// tool (binutils' addr2line or LLVM's llvm-addr2line) reports them.
func addr2line(t testing.TB, tool, path string, addrs []uint64) map[uint64][]a2lFrame {
	t.Helper()
	var in strings.Builder
	for _, a := range addrs {
		in.WriteString("0x" + strconv.FormatUint(a, 16) + "\n")
	}
	out := run(t, in.String(), tool, "-a", "-f", "-i", "-C", "-e", path)
	res := make(map[uint64][]a2lFrame, len(addrs))
	var cur uint64
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "0x") {
			cur, _ = strconv.ParseUint(line[2:], 16, 64)
			res[cur] = nil
			continue
		}
		fn := line
		if !sc.Scan() {
			break
		}
		pos := discriminator.ReplaceAllString(sc.Text(), "")
		f := a2lFrame{function: fn}
		if i := strings.LastIndexByte(pos, ':'); i >= 0 {
			f.file = pos[:i]
			f.line, _ = strconv.Atoi(pos[i+1:])
		}
		res[cur] = append(res[cur], f)
	}
	return res
}

// cloneSuffix matches the suffixes gcc gives split and cloned functions,
// which symbol tables carry and DWARF names do not.
// In C++ names c++filt shows them as ` [clone .isra.0]`.
var cloneSuffix = regexp.MustCompile(`((\.|\s\[clone \.)(cold|part|constprop|isra|lto_priv|localalias)(\.\d+)?\]?)+$`)

func baseName(fn string) string { return cloneSuffix.ReplaceAllString(fn, "") }

func fixture(name string) string { return filepath.Join(fixtures, name) }
