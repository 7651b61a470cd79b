package symbolize

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/sprof/sprof/stacks"
	"github.com/sprof/sprof/symbolize/debugfile"
)

// DefaultCacheBytes is the table cache budget of an ELF symbolizer whose
// Options leave CacheBytes zero: enough for libc, a large C++ service and a
// large Go program at once.
const DefaultCacheBytes = 256 << 20

// Options configure an ELF symbolizer. The zero value is ready to use.
type Options struct {
	// DebugDirs are the global debug directories searched for separate
	// debug files, in order; nil means /usr/lib/debug.
	DebugDirs []string
	// CacheBytes bounds the approximate memory of the cached tables;
	// 0 means DefaultCacheBytes. A table larger than the budget is still
	// used, and is the only one kept. A GSYM symbolizer splits it between
	// its files and its ELF symbolizer (see NewGSYM).
	CacheBytes int64
	// Demangle says how C++ and Rust names are shown; the mangled name
	// goes to Frame.SystemName whenever it differs.
	Demangle Demangling
}

// ELF symbolizes user-space binaries from what the files themselves carry:
// Go's pclntab (function, file and line, also in stripped Go programs), the
// symbol tables of the binary, of its MiniDebugInfo and of its separate
// debug file, and DWARF for files, lines and one frame per inlined call.
//
// Each binary is read once: its tables are built on first use into sorted
// arrays cached by build ID (by device, inode, size and modification time
// for files without one) within a memory budget, and every later lookup is
// a binary search. An ELF is safe for concurrent use.
type ELF struct {
	opts  Options
	cache *cache[*image]
	// noDWARF reads symbol tables and pclntabs alone: set behind a GSYM,
	// whose files hold all the DWARF says (see GSYM.frames).
	noDWARF bool
}

// NewELF returns an ELF symbolizer with its own, empty cache.
func NewELF(opts Options) *ELF {
	if opts.CacheBytes <= 0 {
		opts.CacheBytes = DefaultCacheBytes
	}
	if opts.DebugDirs == nil {
		opts.DebugDirs = []string{debugfile.DefaultDir}
	}
	return &ELF{opts: opts, cache: newCache[*image](opts.CacheBytes)}
}

var _ Symbolizer = (*ELF)(nil)

// Symbolize implements Symbolizer. Frames come innermost first; an offset
// outside the binary's loaded segments, or covered by no symbol, gives no
// frames and no error.
func (s *ELF) Symbolize(dst []stacks.Frame, b Binary, off uint64) ([]stacks.Frame, error) {
	img, err := s.image(b)
	if err != nil {
		return dst, err
	}
	addr, ok := img.loads.Vaddr(off)
	if !ok {
		return dst, nil
	}
	return img.frames(dst, addr, b)
}

// CacheStats reports the work of the table cache so far.
func (s *ELF) CacheStats() CacheStats { return s.cache.statistics() }

// Sweep drops the tables not used since the previous Sweep. A long-lived
// caller (the agent, at each interval) calls it periodically so the
// tables of binaries no longer run are freed, not kept until the budget
// is reached.
func (s *ELF) Sweep() { s.cache.sweep(nil) }

// image returns the cached tables of b, loading them on first use.
func (s *ELF) image(b Binary) (*image, error) {
	if b.BuildID != "" {
		// Hex never collides with the "file:" keys below.
		return s.cache.get(b.BuildID, func() (*image, int64, error) {
			return s.open(b, b.BuildID)
		})
	}
	// Without a build ID the file's identity keys the cache: the same
	// file seen through different /proc paths shares one entry, and a
	// file rewritten in place gets a new one.
	var st syscall.Stat_t
	if err := syscall.Stat(b.Path, &st); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: b.Path, Err: err}
	}
	key := fmt.Sprintf("file:%d:%d:%d:%d.%d", st.Dev, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec)
	return s.cache.get(key, func() (*image, int64, error) { return s.open(b, "") })
}

// open reads b's tables. id is the build ID the caller knows, "" if none.
func (s *ELF) open(b Binary, id string) (*image, int64, error) {
	f, err := os.OpenFile(b.Path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	if !st.Mode().IsRegular() {
		return nil, 0, fmt.Errorf("%s: not a regular file", b.Path)
	}
	// loadImage contains the standard library's panics itself, keeping
	// what it could read; this catches anything else, so a table being
	// loaded always ends and its waiters never hang.
	var img *image
	err = contain(b.Path, func() (err error) {
		img, err = loadImage(f, st.Size(), b.Path, s.opts.Demangle, s.debugLocator(b, id), !s.noDWARF)
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	return img, img.bytes, nil
}

// debugLocator returns the function that finds b's separate debug file
// once its build ID and debuglink are known.
func (s *ELF) debugLocator(b Binary, id string) func(fileID string, link debugfile.Link) string {
	return func(fileID string, link debugfile.Link) string {
		if id == "" {
			id = fileID
		}
		var dirs []string
		for _, p := range []string{b.Name, b.Path} {
			// /proc/PID/map_files names say nothing about where the
			// binary lives; its debuglink neighbours are found by Name.
			if p == "" || strings.Contains(p, "/map_files/") {
				continue
			}
			dirs = append(dirs, filepath.Dir(p))
		}
		debugDirs := s.opts.DebugDirs
		if root := containerRoot(b.Path); root != "" {
			// A container's own debug packages come after the host's.
			debugDirs = slices.Clone(debugDirs)
			for _, d := range s.opts.DebugDirs {
				debugDirs = append(debugDirs, filepath.Join(root, d))
			}
		}
		return debugfile.Find(debugfile.Request{BuildID: id, Link: link, BinaryDirs: dirs, DebugDirs: debugDirs})
	}
}

// containerRoot returns the /proc/PID/root prefix of a path opened
// through a process's root directory, "" for other paths.
func containerRoot(path string) string {
	rest, ok := strings.CutPrefix(path, "/proc/")
	if !ok {
		return ""
	}
	pid, rest, ok := strings.Cut(rest, "/")
	if !ok || pid == "" || strings.Trim(pid, "0123456789") != "" || !strings.HasPrefix(rest, "root/") {
		return ""
	}
	return "/proc/" + pid + "/root"
}

// ErrMalformed is wrapped by the errors for files that the ELF, DWARF or Go
// symbol table readers could not parse.
var ErrMalformed = errors.New("malformed binary")
