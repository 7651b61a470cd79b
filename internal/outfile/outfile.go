// Package outfile writes a command's output to the path its user named
// without destroying what is there. sprof runs as root and is pointed at
// /dev/stdout, /dev/null, FIFOs and symlinks as often as at new files, so
// the kind of node at the path decides how it is written:
//
//   - nothing, or a regular file: written under a temporary name in the same
//     directory and renamed over the path when complete, so that a reader
//     never sees half a profile and a failed run leaves the old file as it
//     was. A recording, which must be readable whatever stops its writer,
//     is renamed into place early (Publish) and written on there;
//   - a symlink: the same, for the file it points to; the link stays;
//   - a character device or a FIFO (/dev/null, a terminal, a pipe): written
//     directly, never replaced;
//   - "-": standard output;
//   - anything else (a directory, a block device, a socket): refused.
//
// Errors name the path as the user gave it, never the temporary file.
package outfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Stdout is the path that means standard output, as in perf and most Unix
// tools.
const Stdout = "-"

// File is an output being written. Write to it, then Commit or Abort;
// Abort after Commit does nothing, so it can be deferred.
type File struct {
	w      io.Writer
	f      *os.File // nil for standard output
	path   string   // as the user named it
	tmp    string   // the temporary name to rename on Commit; "" when none
	target string   // what the rename replaces: path, or its symlinks' end
	done   bool
	err    error // the first write error
}

// maxLinks bounds a chain of symlinks, as the kernel's ELOOP does.
const maxLinks = 40

// Create opens path for writing as its kind of node allows (see the package
// comment); stdout is where "-" writes.
func Create(path string, stdout io.Writer) (*File, error) {
	if path == Stdout {
		return &File{w: stdout, path: path}, nil
	}
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		st = nil
	case err != nil:
		return nil, pathError("create", path, err)
	case st.Mode().IsRegular():
	case st.Mode()&(fs.ModeCharDevice|fs.ModeNamedPipe) != 0:
		// O_NONBLOCK is not set: a FIFO's open waits for its reader,
		// as a shell redirection does.
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return nil, pathError("open", path, err)
		}
		return &File{w: f, f: f, path: path}, nil
	default:
		return nil, fmt.Errorf("output %s is %s; name a regular file, a character device such as /dev/null, a FIFO, or - for standard output", path, kind(st.Mode()))
	}
	target, err := followLinks(path)
	if err != nil {
		return nil, err
	}
	// Named as gsym's writer names its own, so that a tool that cleans
	// up after crashed writers (see symbolize's cache) knows them.
	f, err := os.CreateTemp(filepath.Dir(target), "."+filepath.Base(target)+".tmp*")
	if err != nil {
		return nil, pathError("create", path, err)
	}
	keepOwnerAndMode(f, st)
	return &File{w: f, f: f, path: path, tmp: f.Name(), target: target}, nil
}

// keepOwnerAndMode gives a replacement the permissions and, when sprof may
// (as root), the owner of the file it replaces: a profile written over a
// user's file by sudo stays theirs. A new file gets 0644.
func keepOwnerAndMode(f *os.File, old fs.FileInfo) {
	if old == nil {
		f.Chmod(0o644)
		return
	}
	if sys, ok := old.Sys().(*syscall.Stat_t); ok {
		f.Chown(int(sys.Uid), int(sys.Gid))
	}
	f.Chmod(old.Mode().Perm())
}

// followLinks returns the file that path names after its symlinks, which
// need not exist: the rename replaces the target, not the link.
func followLinks(path string) (string, error) {
	for range maxLinks {
		st, err := os.Lstat(path)
		if errors.Is(err, fs.ErrNotExist) || err == nil && st.Mode()&fs.ModeSymlink == 0 {
			return path, nil
		}
		if err != nil {
			return "", pathError("create", path, err)
		}
		link, err := os.Readlink(path)
		if err != nil {
			return "", pathError("create", path, err)
		}
		if !filepath.IsAbs(link) {
			link = filepath.Join(filepath.Dir(path), link)
		}
		path = link
	}
	return "", fmt.Errorf("create %s: more than %d symlinks", path, maxLinks)
}

// kind names a node that is not written to, for the refusal.
func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeDevice != 0 && m&fs.ModeCharDevice == 0:
		return "a block device, which sprof will not overwrite"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "not a file sprof can write (" + m.Type().String() + ")"
}

// pathError names the user's path and the cause, dropping the name the
// cause carries (a temporary file's, or a symlink's target).
func pathError(op, path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Errorf("%s %s: %w", op, path, err)
}

// Name returns the path as the user named it, or "standard output".
func (f *File) Name() string {
	if f.path == Stdout {
		return "standard output"
	}
	return f.path
}

// Err returns the first write error, nil if none.
func (f *File) Err() error { return f.err }

// Write writes p; its errors name the user's path. After the first error
// every Write fails with it.
func (f *File) Write(p []byte) (int, error) {
	if f.err != nil {
		return 0, f.err
	}
	n, err := f.w.Write(p)
	if err != nil {
		f.err = pathError("write", f.path, err)
	}
	return n, f.err
}

// Publish renames a temporary file into place now, before the output is
// complete; writes go on into the file at the path. A recording publishes
// once sampling runs, so that a kill leaves what it wrote where the user
// looks, and a run that failed to start leaves the old file alone.
func (f *File) Publish() error {
	if f.tmp == "" || f.err != nil {
		return f.err
	}
	if err := os.Rename(f.tmp, f.target); err != nil {
		f.err = pathError("write", f.path, err)
		return f.err
	}
	f.tmp = ""
	return nil
}

// Commit completes the output: it closes the file and renames a temporary
// file into place.
func (f *File) Commit() error {
	if f.done {
		return f.err
	}
	f.done = true
	if f.f == nil {
		return f.err
	}
	err := f.f.Close()
	if f.err == nil && err != nil {
		f.err = pathError("write", f.path, err)
	}
	if f.tmp != "" {
		if f.err == nil {
			if err := os.Rename(f.tmp, f.target); err != nil {
				f.err = pathError("write", f.path, err)
			}
		}
		if f.err != nil {
			os.Remove(f.tmp)
		}
	}
	return f.err
}

// Abort gives the output up: a temporary file is removed and the path left
// as it was; a published file keeps what was written, which for a
// recording is readable up to its last complete chunk.
func (f *File) Abort() {
	if f == nil || f.done {
		return
	}
	f.done = true
	if f.f != nil {
		f.f.Close()
	}
	if f.tmp != "" {
		os.Remove(f.tmp)
	}
}
