package container

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// maxCgroupFile caps what is read of a cgroup file. A real one is a line
// per cgroup v1 hierarchy (about a dozen) of a path each; the cap only
// keeps a hostile or broken procfs from costing memory.
const maxCgroupFile = 64 << 10

// OfProcess returns the container that process pid runs in, from
// procRoot/PID/cgroup (procRoot is normally /proc): FromCgroup of the file.
func OfProcess(procRoot string, pid uint32) (string, error) {
	f, err := os.Open(filepath.Join(procRoot, strconv.FormatUint(uint64(pid), 10), "cgroup"))
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxCgroupFile))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", f.Name(), err)
	}
	return FromCgroup(b), nil
}

// idLen is the length of a container ID: a SHA-256 in hex.
const idLen = 64

// scopePrefixes are the prefixes of the systemd units the runtimes put a
// container in, `PREFIX-ID.scope`; cgroupfs drivers name the cgroup
// `PREFIX-ID`.
var scopePrefixes = [...]string{"docker-", "cri-containerd-", "crio-", "libpod-"}

// bareParents are the cgroups whose children are named by the bare ID under
// cgroupfs drivers: Docker's.
var bareParents = [...]string{"docker"}

// FromCgroup returns the ID of the container that the process whose
// /proc/PID/cgroup is b runs in, in lower-case hex, or "" when it runs in no
// container this package recognises. b may hold anything: lines that are
// not `hierarchy:controllers:path` are skipped.
func FromCgroup(b []byte) string {
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte{'\n'})
		// hierarchy-ID:controller-list:path; the path may hold ':'.
		_, rest, ok := bytes.Cut(line, []byte{':'})
		if !ok {
			continue
		}
		if _, path, ok := bytes.Cut(rest, []byte{':'}); ok {
			if id := fromPath(string(path)); id != "" {
				return id
			}
		}
	}
	return ""
}

// fromPath looks for a container's cgroup in path, innermost first.
func fromPath(path string) string {
	segs := strings.Split(path, "/")
	for i := len(segs) - 1; i >= 0; i-- {
		if id := fromSegment(segs, i); id != "" {
			return id
		}
	}
	return ""
}

// fromSegment returns the container ID that segment i of a cgroup path
// names, if it names one.
func fromSegment(segs []string, i int) string {
	s := segs[i]
	if len(s) == idLen {
		if isID(s) && i > 0 && bareParent(segs[:i]) {
			return strings.ToLower(s)
		}
		return ""
	}
	name := strings.TrimSuffix(s, ".scope")
	for _, p := range scopePrefixes {
		if id, ok := strings.CutPrefix(name, p); ok && len(id) == idLen && isID(id) {
			return strings.ToLower(id)
		}
	}
	return ""
}

// bareParent reports whether a cgroup named by a bare ID under the path
// parents is a container's: one of Docker's, or a Kubernetes pod's
// container under the cgroupfs driver (kubepods/…/podUID/ID).
func bareParent(parents []string) bool {
	parent := parents[len(parents)-1]
	for _, p := range bareParents {
		if parent == p {
			return true
		}
	}
	if !strings.HasPrefix(parent, "pod") {
		return false
	}
	for _, s := range parents[:len(parents)-1] {
		if strings.HasPrefix(s, "kubepods") {
			return true
		}
	}
	return false
}

func isID(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}
