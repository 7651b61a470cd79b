package debugfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/sprof/sprof/symbolize/buildid"
)

// DefaultDir is the global debug directory of Debian, Fedora and gdb.
const DefaultDir = "/usr/lib/debug"

// maxCRCBytes bounds how much of a debuglink candidate is read to check its
// CRC; debug files of the largest programs stay well below it.
const maxCRCBytes = 8 << 30

// Link is the content of a `.gnu_debuglink` section: the debug file's base
// name and the CRC32 of its contents.
type Link struct {
	Name string
	CRC  uint32
}

// ParseLink decodes a `.gnu_debuglink` section: a NUL-terminated file name,
// padding to a multiple of four bytes, and the CRC32 in the byte order of
// the ELF file.
func ParseLink(b []byte, order binary.ByteOrder) (Link, error) {
	n := bytes.IndexByte(b, 0)
	if n <= 0 {
		return Link{}, errors.New("debuglink: file name is empty or not NUL-terminated")
	}
	crcOff := (n + 4) &^ 3
	if crcOff+4 > len(b) {
		return Link{}, fmt.Errorf("debuglink: CRC at offset %d runs past the section's %d bytes", crcOff, len(b))
	}
	name := string(b[:n])
	if !safeName(name) {
		return Link{}, fmt.Errorf("debuglink: %q is not a plain file name", name)
	}
	return Link{Name: name, CRC: order.Uint32(b[crcOff:])}, nil
}

// safeName keeps a hostile debuglink from naming a file outside the
// directories searched.
func safeName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, "/\x00")
}

// Request describes the binary whose debug file is wanted.
type Request struct {
	// BuildID is the binary's GNU build ID in lower-case hex, "" if none.
	BuildID string
	// Link is the binary's `.gnu_debuglink`, zero if it has none.
	Link Link
	// BinaryDirs are the directories the binary is known by, for debuglink
	// candidates: where the process saw it and where it can be opened now.
	BinaryDirs []string
	// DebugDirs are the global debug directories, in order; nil means
	// DefaultDir.
	DebugDirs []string
}

// Find returns the path of the binary's debug file, or "" when there is
// none. Candidates that exist but do not match are skipped.
func Find(r Request) string {
	dirs := r.DebugDirs
	if dirs == nil {
		dirs = []string{DefaultDir}
	}
	if buildid.Valid(r.BuildID) {
		for _, d := range dirs {
			p := filepath.Join(d, ".build-id", r.BuildID[:2], r.BuildID[2:]+".debug")
			if matchesBuildID(p, r.BuildID) {
				return p
			}
		}
	}
	if !safeName(r.Link.Name) {
		return ""
	}
	var candidates []string
	for _, bd := range r.BinaryDirs {
		candidates = append(candidates,
			filepath.Join(bd, r.Link.Name),
			filepath.Join(bd, ".debug", r.Link.Name))
	}
	for _, d := range dirs {
		for _, bd := range r.BinaryDirs {
			if filepath.IsAbs(bd) {
				candidates = append(candidates, filepath.Join(d, bd, r.Link.Name))
			}
		}
	}
	seen := make(map[string]bool, len(candidates))
	for _, p := range candidates {
		if seen[p] {
			continue
		}
		seen[p] = true
		if matchesCRC(p, r.Link.CRC) {
			return p
		}
	}
	return ""
}

// openRegular opens path for reading only if it is a regular file; the
// non-blocking open keeps a FIFO planted under a debuglink name from
// stalling the profiler.
func openRegular(path string) (*os.File, int64, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, 0, fmt.Errorf("%s: not a regular file", path)
	}
	return f, st.Size(), nil
}

func matchesBuildID(path, id string) bool {
	f, _, err := openRegular(path)
	if err != nil {
		return false
	}
	defer f.Close()
	got, err := buildid.Read(f)
	return err == nil && got == id
}

func matchesCRC(path string, crc uint32) bool {
	f, size, err := openRegular(path)
	if err != nil || size > maxCRCBytes {
		return false
	}
	defer f.Close()
	h := crc32.NewIEEE()
	if _, err := io.Copy(h, f); err != nil {
		return false
	}
	return h.Sum32() == crc
}
