package cpython

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/sprof/sprof/internal/elfx"
)

// Mapping is one executable mapping of a process: [Start, Limit) holds
// the file Path, as the process names it, from file offset Offset on.
type Mapping struct {
	Start, Limit, Offset uint64
	Path                 string
}

// Range is a runtime address range [Start, Limit).
type Range struct{ Start, Limit uint64 }

// Process is what sprof knows of one Python process's interpreter.
type Process struct {
	Version Version
	Layout  Layout
	// File is the interpreter's file, libpython3.X.so or python3.X.
	File string
	// Runtime is the address of _PyRuntime, CodeType of PyCode_Type.
	Runtime, CodeType uint64
	// Eval holds the code of _PyEval_EvalFrameDefault (and of its cold
	// part, where the symbol table names one).
	Eval []Range
	// PthreadTID is where libc's struct pthread keeps the thread's kernel
	// id, for a Layout.ThreadPthread layout; NoField for others.
	PthreadTID uint64
}

// InEval reports whether the native frame at addr runs
// _PyEval_EvalFrameDefault; isCall says addr is a return address, which
// may lie just past the function.
func (p *Process) InEval(addr uint64, isCall bool) bool {
	if isCall {
		addr--
	}
	for _, r := range p.Eval {
		if r.Start <= addr && addr < r.Limit {
			return true
		}
	}
	return false
}

// Evaluates reports whether the native user stack native (leaf first,
// native[0] the sampled pc, the rest return addresses) runs Python code:
// whether a frame of it runs _PyEval_EvalFrameDefault.
func (p *Process) Evaluates(native []uint64) bool {
	for i, addr := range native {
		if p.InEval(addr, i > 0) {
			return true
		}
	}
	return false
}

// interpreterName matches the files an interpreter is mapped from: the
// shared library, or an executable linked statically with it (Debian's
// python3.11). A "d" build is a debug build; "t" (free-threaded, 3.13+)
// keeps its frames differently and is not matched.
var interpreterName = regexp.MustCompile(`^(?:libpython3\.(\d+)d?\.so(?:\.[0-9.]+)?|python3\.(\d+)d?)$`)

// Interpreter reports whether path names a CPython interpreter file, and
// its version.
func Interpreter(path string) (Version, bool) {
	m := interpreterName.FindStringSubmatch(filepath.Base(path))
	if m == nil {
		return Version{}, false
	}
	minor, err := strconv.Atoi(m[1] + m[2])
	if err != nil || minor > 99 {
		return Version{}, false
	}
	return Version{3, minor}, true
}

// ErrNotPython is returned by Detect for a process that maps no CPython
// interpreter, or not all of it yet: a 3.9 or 3.10 whose libc glibc's
// loader has not mapped so far (the process has only just started).
var ErrNotPython = errors.New("no CPython interpreter mapped")

// Detect finds the interpreter of process pid, given its executable
// mappings, and what sprof needs to read its frames. procRoot is where
// /proc is mounted. The interpreter file is opened through
// /proc/PID/map_files (the very file mapped, in any mount namespace), or
// through /proc/PID/root where that is not allowed. Errors wrap
// ErrNotPython or ErrUnsupported where they apply.
func Detect(procRoot string, pid uint32, maps []Mapping) (*Process, error) {
	var tried error = ErrNotPython
	// A python3.X executable that links libpython has no _PyRuntime of
	// its own: each candidate is tried, libraries first.
	for pass := 0; pass < 2; pass++ {
		for _, m := range maps {
			v, ok := Interpreter(m.Path)
			if !ok || (filepath.Base(m.Path)[0] == 'l') != (pass == 0) {
				continue
			}
			p, err := detectIn(procRoot, pid, m, v, maps)
			if err == nil {
				return p, nil
			}
			if errors.Is(tried, ErrNotPython) { // a file that is no interpreter says least
				tried = err
			}
		}
	}
	return nil, tried
}

// symbols an interpreter must have.
const (
	symRuntime  = "_PyRuntime"
	symEval     = "_PyEval_EvalFrameDefault"
	symEvalCold = "_PyEval_EvalFrameDefault.cold"
	symCodeType = "PyCode_Type"
)

func detectIn(procRoot string, pid uint32, m Mapping, v Version, maps []Mapping) (*Process, error) {
	f, err := openMapped(procRoot, pid, m)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p := &Process{Version: v, File: m.Path, PthreadTID: NoField}
	var order binary.ByteOrder
	err = elfx.Read(f, m.Path, func(ef *elf.File) error {
		order = ef.ByteOrder
		bias := elfx.LoadSegments(ef).Bias(m.Start, m.Offset)
		found := map[string]elf.Symbol{}
		for _, list := range []func() ([]elf.Symbol, error){ef.DynamicSymbols, ef.Symbols} {
			syms, _ := list()
			for _, s := range syms {
				switch s.Name {
				case symRuntime, symEval, symEvalCold, symCodeType:
					if _, dup := found[s.Name]; !dup {
						found[s.Name] = s
					}
				}
			}
		}
		for _, name := range []string{symRuntime, symEval, symCodeType} {
			if _, ok := found[name]; !ok {
				return fmt.Errorf("%w: %s has no symbol %s", ErrNotPython, m.Path, name)
			}
		}
		p.Runtime = found[symRuntime].Value + bias
		p.CodeType = found[symCodeType].Value + bias
		for _, name := range []string{symEval, symEvalCold} {
			if s, ok := found[name]; ok && s.Size > 0 {
				p.Eval = append(p.Eval, Range{s.Value + bias, s.Value + bias + s.Size})
			}
		}
		if len(p.Eval) == 0 {
			return fmt.Errorf("%w: %s: %s has size 0", ErrNotPython, m.Path, symEval)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if v.Minor >= 13 {
		mem, err := os.Open(filepath.Join(procRoot, strconv.Itoa(int(pid)), "mem"))
		if err != nil {
			return nil, err
		}
		defer mem.Close()
		raw := make([]byte, DebugOffsetsSize)
		if _, err := mem.ReadAt(raw, int64(p.Runtime)); err != nil {
			return nil, fmt.Errorf("python %v: reading _Py_DebugOffsets at %#x: %w", v, p.Runtime, err)
		}
		p.Layout, err = parseDebugOffsets(raw, v, order)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.Path, err)
		}
		return p, nil
	}
	if p.Layout, err = tableLayout(v); err != nil {
		return nil, err
	}
	if p.Layout.ThreadPthread {
		p.PthreadTID, err = pthreadTID(procRoot, pid, maps)
		if errors.Is(err, errNoLibcYet) {
			return nil, fmt.Errorf("%w: Python %v names its threads by pthread_t, and %w", ErrNotPython, v, err)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: Python %v names its threads by pthread_t: %w", ErrUnsupported, v, err)
		}
	}
	return p, nil
}

// libcName matches the files glibc's thread descriptor may be in:
// libc.so.6 from 2.34 on, libpthread before.
var libcName = regexp.MustCompile(`^lib(?:c|pthread)(?:\.so\.[0-9]+|-2\.[0-9]+\.so)$`)

// symPthreadTID is glibc's description of struct pthread's tid field, for
// libthread_db: three 32-bit words, the field's size in bits, its count
// and its offset. glibc exports it (GLIBC_PRIVATE) so that a debugger
// needs no debug information to find a thread's id; so does sprof.
const symPthreadTID = "_thread_db_pthread_tid"

// maxPthreadTID bounds the offset of the tid in struct pthread: it is in
// the first cache lines in every glibc (720 on x86-64, 208 on arm64).
const maxPthreadTID = 4096

// loaderName matches glibc's dynamic loader: ld-linux-x86-64.so.2,
// ld-linux-aarch64.so.1, ld-2.31.so before glibc 2.34.
var loaderName = regexp.MustCompile(`^ld-(?:linux-[a-z0-9_-]+\.so\.[0-9]+|2\.[0-9]+\.so)$`)

// errNoLibcYet says glibc's loader is mapped and libc is not: the process
// has just started, and its loader will map libc.
var errNoLibcYet = errors.New("glibc's loader has not mapped libc yet")

// pthreadTID finds where the libc that process pid maps keeps a thread's
// kernel id in struct pthread, from glibc's descriptor of that field.
func pthreadTID(procRoot string, pid uint32, maps []Mapping) (uint64, error) {
	libc, loader := false, false
	for _, m := range maps {
		name := filepath.Base(m.Path)
		loader = loader || loaderName.MatchString(name)
		if !libcName.MatchString(name) {
			continue
		}
		libc = true
		f, err := openMapped(procRoot, pid, m)
		if err != nil {
			return 0, err
		}
		var off uint64
		err = elfx.Read(f, m.Path, func(ef *elf.File) error {
			var err error
			off, err = readPthreadTID(ef)
			return err
		})
		f.Close()
		if err == nil {
			return off, nil
		}
		if !errors.Is(err, errNoDescriptor) {
			return 0, fmt.Errorf("%s: %w", m.Path, err)
		}
	}
	if loader && !libc {
		return 0, errNoLibcYet
	}
	return 0, fmt.Errorf("no glibc with %s mapped (musl and static binaries are not supported)", symPthreadTID)
}

var errNoDescriptor = errors.New("no " + symPthreadTID)

// readPthreadTID reads glibc's descriptor of struct pthread's tid from f.
func readPthreadTID(f *elf.File) (uint64, error) {
	syms, _ := f.DynamicSymbols()
	for _, s := range syms {
		if s.Name != symPthreadTID {
			continue
		}
		if int(s.Section) >= len(f.Sections) || s.Section == elf.SHN_UNDEF {
			return 0, fmt.Errorf("%s in section %d of %d", symPthreadTID, s.Section, len(f.Sections))
		}
		sec := f.Sections[s.Section]
		var raw [12]byte
		if s.Value < sec.Addr {
			return 0, fmt.Errorf("%s at %#x, before its section at %#x", symPthreadTID, s.Value, sec.Addr)
		}
		if _, err := sec.ReadAt(raw[:], int64(s.Value-sec.Addr)); err != nil {
			return 0, fmt.Errorf("reading %s at %#x: %w", symPthreadTID, s.Value, err)
		}
		bits, count, off := f.ByteOrder.Uint32(raw[0:]), f.ByteOrder.Uint32(raw[4:]), f.ByteOrder.Uint32(raw[8:])
		if bits != 32 || count != 1 || off >= maxPthreadTID {
			return 0, fmt.Errorf("%s says %d bits, %d of them, at offset %d; want one 32-bit field below %d",
				symPthreadTID, bits, count, off, maxPthreadTID)
		}
		return uint64(off), nil
	}
	return 0, errNoDescriptor
}

// openMapped opens the file of mapping m of process pid.
func openMapped(procRoot string, pid uint32, m Mapping) (*os.File, error) {
	dir := filepath.Join(procRoot, strconv.Itoa(int(pid)))
	f, err := os.Open(filepath.Join(dir, "map_files", fmt.Sprintf("%x-%x", m.Start, m.Limit)))
	if err == nil {
		return f, nil
	}
	return os.Open(filepath.Join(dir, "root", m.Path))
}

// ReadMaps reads the executable file mappings of process pid from
// /proc/PID/maps, for Detect.
func ReadMaps(procRoot string, pid uint32) ([]Mapping, error) {
	data, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(int(pid)), "maps"))
	if err != nil {
		return nil, err
	}
	var maps []Mapping
	for _, line := range strings.Split(string(data), "\n") {
		// start-limit perms offset dev inode path
		f := strings.Fields(line)
		if len(f) < 6 || len(f[1]) < 3 || f[1][2] != 'x' || !strings.HasPrefix(f[5], "/") {
			continue
		}
		start, limit, ok := strings.Cut(f[0], "-")
		m := Mapping{Path: strings.Join(f[5:], " ")}
		var e1, e2, e3 error
		m.Start, e1 = strconv.ParseUint(start, 16, 64)
		m.Limit, e2 = strconv.ParseUint(limit, 16, 64)
		m.Offset, e3 = strconv.ParseUint(f[2], 16, 64)
		if ok && e1 == nil && e2 == nil && e3 == nil {
			maps = append(maps, m)
		}
	}
	return maps, nil
}
