package collector

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sprof/sprof/symbolize"
	"github.com/sprof/sprof/symbolize/buildid"
	"github.com/sprof/sprof/unwind/goruntime"
)

// maxPinned bounds the files kept open for symbolization. The Go runtime
// raises the descriptor soft limit to the hard one (1,048,576 on Debian)
// at start, and files are pinned from their first mapping on, so a busy
// host's distinct binaries fit.
const maxPinned = 4096

// binaryFile is one mapped file, shared by every mapping and process that
// maps it.
type binaryFile struct {
	// name is the path as the processes see it.
	name    string
	buildID string
	// pinned is the file kept open once a sample hit it, so it can be
	// read at the end even after its process exited or it was deleted.
	pinned *os.File
	tried  bool
	// morestack and goRoots are where a Go binary's runtime.morestack
	// and the functions its stacks begin in lie (goruntime.Code), in file
	// offsets (empty for other binaries); goKnown says they were looked
	// up (gostack.go).
	morestack codeRange
	goRoots   []codeRange
	goKnown   bool
	// goRuntime is what the sampler needs to follow morestack to the
	// goroutine; nil where it cannot (see goruntime.Code.Runtime).
	goRuntime *goruntime.Runtime
}

// fileKey identifies a binaryFile: by build ID when there is one, else by
// device and inode (from /proc maps) as well as name.
type fileKey struct {
	name, buildID, dev string
	inode              uint64
}

// files interns binaryFiles and remembers build IDs read from /proc, so a
// library mapped by a thousand processes is read once.
type files struct {
	procRoot string
	byKey    map[fileKey]*binaryFile
	// idByInode caches build IDs read from disk, "" when there is none.
	idByInode map[fileKey]string
	pinned    int
	// pinnedByID holds a pinned file for each build ID, the twin that
	// names the same binary mapped from a path that could not be opened.
	pinnedByID map[string]*binaryFile
	// vdso is sprof's own vDSO, which native processes share, and
	// vdsoSize the size of its mapping; nil when it could not be read.
	vdso     *binaryFile
	vdsoSize uint64
}

// vdsoName is how the kernel names the vDSO's mapping.
const vdsoName = "[vdso]"

func newFiles(procRoot string) *files {
	fs := &files{procRoot: procRoot, byKey: map[fileKey]*binaryFile{}, idByInode: map[fileKey]string{},
		pinnedByID: map[string]*binaryFile{}}
	// Without it, [vdso] frames stay unnamed and nothing else changes.
	fs.vdso, fs.vdsoSize, _ = openVDSO()
	return fs
}

func (fs *files) intern(k fileKey) *binaryFile {
	if f := fs.byKey[k]; f != nil {
		return f
	}
	f := &binaryFile{name: k.name, buildID: k.buildID}
	fs.byKey[k] = f
	return f
}

// fromMMap returns the file of a side-band MMAP2 record, which carries the
// build ID when the kernel could read it; when it could not, the file is
// read through the process if it is still there.
func (fs *files) fromMMap(pid uint32, start, limit uint64, name string, buildID []byte) *binaryFile {
	if name == vdsoName {
		return fs.vdsoAt(start, limit)
	}
	id := hex.EncodeToString(buildID)
	if id == "" && name[0] != '[' {
		id = fs.readBuildID(pid, start, limit, name)
	}
	return fs.intern(fileKey{name: name, buildID: id})
}

// readBuildID reads the build ID of a file mapped by pid, "" if it has none
// or cannot be read.
func (fs *files) readBuildID(pid uint32, start, limit uint64, name string) string {
	for _, p := range fs.candidates(pid, start, limit, name) {
		if id, err := buildid.File(p); err == nil {
			return id
		} else if errors.Is(err, buildid.ErrNotFound) {
			return ""
		}
	}
	return ""
}

// fromMaps returns the file of a /proc/PID/maps entry, reading its build ID
// through the process's own view of it.
func (fs *files) fromMaps(pid uint32, e *mapsEntry) *binaryFile {
	if e.path == vdsoName {
		return fs.vdsoAt(e.start, e.limit)
	}
	ik := fileKey{name: e.path, dev: e.dev, inode: e.inode}
	id, ok := fs.idByInode[ik]
	if !ok && e.path[0] != '[' {
		id = fs.readBuildID(pid, e.start, e.limit, e.path)
		fs.idByInode[ik] = id
	}
	if id != "" {
		return fs.intern(fileKey{name: e.path, buildID: id})
	}
	return fs.intern(ik)
}

// vdsoAt returns the file of a [vdso] mapping at [start, limit): sprof's
// own vDSO when the mapping is a native process's — above 4 GiB and of the
// same size — else a file that stays unnamed.
func (fs *files) vdsoAt(start, limit uint64) *binaryFile {
	if fs.vdso != nil && start >= lowestNativeVDSO && limit-start == fs.vdsoSize {
		return fs.vdso
	}
	return fs.intern(fileKey{name: vdsoName})
}

// candidates lists where sprof may open a file process pid maps at
// [start, limit), best first: map_files is the mapped file itself, even
// deleted or in another mount namespace; root/ is the process's view of the
// path; the bare path is the host's view.
func (fs *files) candidates(pid uint32, start, limit uint64, name string) []string {
	return candidatePaths(fs.procRoot, pid, start, limit, name)
}

func candidatePaths(procRoot string, pid uint32, start, limit uint64, name string) []string {
	pidDir := filepath.Join(procRoot, fmt.Sprint(pid))
	return []string{
		filepath.Join(pidDir, "map_files", fmt.Sprintf("%x-%x", start, limit)),
		filepath.Join(pidDir, "root", name),
		name,
	}
}

// pin opens m's file for symbolization, once: at first sight of a
// mapping of a new process, while the process most likely still runs
// and its map_files entry opens the file even if deleted, and at the
// first sample in it.
func (fs *files) pin(pid uint32, m *mapping) {
	f := m.bin
	if f.tried || f.name[0] == '[' || fs.pinned >= maxPinned {
		return
	}
	f.tried = true
	if h := fs.open(pid, m); h != nil {
		f.pinned = h
		fs.pinned++
		if f.buildID != "" && fs.pinnedByID[f.buildID] == nil {
			fs.pinnedByID[f.buildID] = f
		}
	}
}

// unpin closes f's pinned file.
func (fs *files) unpin(f *binaryFile) {
	if f.pinned == nil {
		return
	}
	f.pinned.Close()
	f.pinned = nil
	fs.pinned--
	if fs.pinnedByID[f.buildID] == f {
		delete(fs.pinnedByID, f.buildID)
	}
}

// source returns what the Symbolizer reads for f and whether it can:
// f's pinned file; else, for a file that could not be opened (a process
// that exited and whose binary was deleted before sprof got to it), a
// pinned file with the same build ID, the same binary under another path
// or run again; else f's path.
// It also returns the pinned file the Binary reads, nil if none.
func (fs *files) source(f *binaryFile) (symbolize.Binary, *os.File, bool) {
	if f.pinned == nil && f.buildID != "" {
		if twin := fs.pinnedByID[f.buildID]; twin != nil {
			b := twin.binary()
			b.Name = f.name
			return b, twin.pinned, true
		}
	}
	return f.binary(), f.pinned, f.readable()
}

// open opens the file pid maps at m, or returns nil. Paths other than
// map_files may name a different file than the process mapped, so they
// are checked against the build ID when there is one.
func (fs *files) open(pid uint32, m *mapping) *os.File {
	f := m.bin
	for i, p := range fs.candidates(pid, m.start, m.limit, f.name) {
		h, err := os.Open(p)
		if err != nil {
			continue
		}
		if i > 0 && f.buildID != "" {
			if id, err := buildid.Read(h); err != nil || id != f.buildID {
				h.Close()
				continue
			}
		}
		return h
	}
	return nil
}

// readable reports whether the Symbolizer can read f: a file, or a
// pseudo-file like [vdso] that sprof holds a copy of.
func (f *binaryFile) readable() bool { return f.name[0] != '[' || f.pinned != nil }

// binary is what the Symbolizer needs to read f.
func (f *binaryFile) binary() symbolize.Binary {
	path := f.name
	if f.pinned != nil {
		path = fmt.Sprintf("/proc/self/fd/%d", f.pinned.Fd())
	}
	return symbolize.Binary{Path: path, Name: f.name, BuildID: f.buildID}
}

// close closes the pinned files.
func (fs *files) close() {
	for _, f := range fs.byKey {
		fs.unpin(f)
	}
	if fs.vdso != nil && fs.vdso.pinned != nil {
		fs.vdso.pinned.Close()
		fs.vdso.pinned = nil
	}
}
