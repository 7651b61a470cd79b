package jit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Bounds on reading one process's files.
const (
	// maxReadPerUpdate is the most of a perf map one Update reads; the
	// rest waits for the next, so a huge file never stalls a caller.
	maxReadPerUpdate = 16 << 20
	// MaxFileBytes is the most of one file a Process ever reads.
	MaxFileBytes = 1 << 30
	// maxStatus bounds the read of /proc/PID/status.
	maxStatus = 64 << 10
)

// dumpName matches the file name runtimes give a jitdump.
var dumpName = regexp.MustCompile(`^jit-[0-9]+\.dump$`)

// IsJITDump reports whether a mapped file's path names a jitdump. A
// runtime that writes one maps it executable so that perf's side band
// records where it is, and that mapping is how sprof finds it too.
func IsJITDump(path string) bool { return dumpName.MatchString(filepath.Base(path)) }

// Process reads the JIT symbol files of one process as they grow: its
// perf map, found through the process's root directory under the pid it
// has in its own namespace, and the jitdumps it maps. Each file is kept
// open once found, so its tail is read after the process exited and the
// file was removed. A Process is not safe for concurrent use.
type Process struct {
	// Symbols holds what was read so far.
	Symbols Table
	root    string // the process's root directory, through /proc
	mapPath string // the perf map's path from sprof's view, "" until known
	perfMap *perfMapFile
	dumps   map[string]*dumpFile
}

type perfMapFile struct {
	f      *os.File
	off    int64
	parser PerfMap
}

type dumpFile struct {
	f      *os.File
	parser JITDump
	err    error // sticky: the file can be read no further
}

// NewProcess returns a Process for pid as /proc (procRoot) shows it. It
// reads nothing yet.
func NewProcess(procRoot string, pid uint32) *Process {
	dir := filepath.Join(procRoot, strconv.FormatUint(uint64(pid), 10))
	p := &Process{root: filepath.Join(dir, "root"), dumps: map[string]*dumpFile{}}
	nspid := pid
	if st, err := readBounded(filepath.Join(dir, "status"), maxStatus); err == nil {
		if n, ok := namespacePid(st); ok {
			nspid = n
		}
	}
	p.mapPath = filepath.Join(p.root, "tmp", fmt.Sprintf("perf-%d.map", nspid))
	return p
}

// namespacePid returns the pid of the process in its innermost pid
// namespace: the last field of the NSpid line of /proc/PID/status.
func namespacePid(status []byte) (uint32, bool) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "NSpid:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0, false
		}
		n, err := strconv.ParseUint(f[len(f)-1], 10, 32)
		return uint32(n), err == nil
	}
	return 0, false
}

func readBounded(path string, n int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, n))
}

// AddDump has the Process read the jitdump at path, which the process
// maps under the name name; a name already added is ignored. path should
// be the mapping's /proc/PID/map_files entry, which opens the file the
// process mapped even in another mount namespace.
func (p *Process) AddDump(path, name string) error {
	if _, ok := p.dumps[name]; ok {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		p.dumps[name] = &dumpFile{err: err}
		return fmt.Errorf("jitdump %s: %w", name, err)
	}
	p.dumps[name] = &dumpFile{f: f}
	return nil
}

// Update reads what the process's files gained since the last Update.
// Damage inside a file is skipped (see Malformed); the error says what
// could not be read at all.
func (p *Process) Update() error {
	var errs []error
	if err := p.updatePerfMap(); err != nil {
		errs = append(errs, err)
	}
	for name, d := range p.dumps {
		if d.err != nil || d.f == nil {
			continue
		}
		st, err := d.f.Stat()
		if err != nil {
			d.err = err
		} else {
			d.err = d.parser.Read(d.f, min(st.Size(), MaxFileBytes), &p.Symbols)
		}
		if d.err != nil && !errors.Is(d.err, ErrClosed) {
			errs = append(errs, fmt.Errorf("jitdump %s: %w", name, d.err))
		}
	}
	return errors.Join(errs...)
}

// updatePerfMap opens the perf map once it exists and reads what it
// gained. A runtime that rewrites the file (the JVM does, on every
// jcmd Compiler.perfmap) makes a Process read it again from the start.
func (p *Process) updatePerfMap() error {
	if p.perfMap != nil && p.replaced() {
		p.perfMap.f.Close()
		p.perfMap = nil
	}
	if p.perfMap == nil {
		f, err := os.Open(p.mapPath)
		if err != nil {
			return nil // none yet, or the process is gone: nothing to read
		}
		p.perfMap = &perfMapFile{f: f}
	}
	m := p.perfMap
	st, err := m.f.Stat()
	if err != nil {
		return fmt.Errorf("perf map: %w", err)
	}
	if st.Size() < m.off || !m.continues() { // written anew
		*m = perfMapFile{f: m.f}
	}
	n := min(st.Size(), MaxFileBytes) - m.off
	if n <= 0 {
		return nil
	}
	buf := make([]byte, min(n, maxReadPerUpdate))
	got, err := m.f.ReadAt(buf, m.off)
	m.off += int64(got)
	m.parser.Feed(buf[:got], p.Symbols.Add)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("perf map: %w", err)
	}
	return nil
}

// continues reports whether the file still ends its last line read where
// it did: a runtime that rewrote it in place, grown past where sprof had
// read, most likely has no line break exactly there.
func (m *perfMapFile) continues() bool {
	if m.off == 0 || len(m.parser.partial) > 0 || m.parser.skipping {
		return true
	}
	var b [1]byte
	_, err := m.f.ReadAt(b[:], m.off-1)
	return err == nil && b[0] == '\n'
}

// replaced reports whether the perf map's path now names another file
// than the one open. A path that no longer opens (the process exited) is
// not a replacement: the open file keeps its tail.
func (p *Process) replaced() bool {
	now, err := os.Stat(p.mapPath)
	if err != nil {
		return false
	}
	open, err := p.perfMap.f.Stat()
	return err == nil && !os.SameFile(now, open)
}

// Malformed counts the lines and records skipped in the process's files,
// and returns the first one's error.
func (p *Process) Malformed() (int, error) {
	var n int
	var first error
	if p.perfMap != nil {
		n, first = p.perfMap.parser.Malformed, p.perfMap.parser.Err
	}
	for _, d := range p.dumps {
		n += d.parser.Malformed
		if first == nil {
			first = d.parser.Err
		}
	}
	return n, first
}

// Close closes the files.
func (p *Process) Close() {
	if p.perfMap != nil {
		p.perfMap.f.Close()
		p.perfMap = nil
	}
	for _, d := range p.dumps {
		if d.f != nil {
			d.f.Close()
			d.f = nil
		}
	}
}
