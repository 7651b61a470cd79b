// Package containertest puts processes in a container's cgroup for tests:
// a real cgroup v2 directory named as Docker's systemd driver names a
// container's (docker-ID.scope), so the kernel itself writes the
// /proc/PID/cgroup line that package container reads. No runtime is
// needed, only root and a cgroup v2 hierarchy.
package containertest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sprof/sprof/internal/testenv"
)

// Cgroup is a container's cgroup made for one test.
type Cgroup struct {
	// ID is the container ID the cgroup's name carries: 64 random hex
	// digits.
	ID   string
	root string // the cgroup v2 mount
	dir  string
}

// New makes a cgroup for a container with a fresh ID under a directory of
// its own at the root of the cgroup v2 hierarchy, and removes both when t
// ends, moving any process still in it back to the root. It stops t (see
// testenv.Unavailable) without root or cgroup v2.
func New(t testing.TB) *Cgroup {
	t.Helper()
	testenv.RequireRoot(t)
	root, err := mount()
	if err != nil {
		testenv.Unavailable(t, err.Error())
	}
	var b [32]byte
	rand.Read(b[:])
	c := &Cgroup{ID: hex.EncodeToString(b[:]), root: root}
	parent, err := os.MkdirTemp(root, "sprof-test-")
	if err != nil {
		testenv.Unavailable(t, fmt.Sprintf("cannot make a cgroup: %v", err))
	}
	c.dir = filepath.Join(parent, "docker-"+c.ID+".scope")
	if err := os.Mkdir(c.dir, 0o755); err != nil {
		os.Remove(parent)
		t.Fatalf("make a cgroup: %v", err)
	}
	t.Cleanup(func() {
		if b, err := os.ReadFile(filepath.Join(c.dir, "cgroup.procs")); err == nil {
			for _, pid := range strings.Fields(string(b)) {
				os.WriteFile(filepath.Join(root, "cgroup.procs"), []byte(pid), 0)
			}
		}
		if err := errors.Join(os.Remove(c.dir), os.Remove(parent)); err != nil {
			t.Errorf("remove the test's cgroup: %v", err)
		}
	})
	return c
}

// Add moves process pid into the container's cgroup.
func (c *Cgroup) Add(t testing.TB, pid int) {
	t.Helper()
	if err := os.WriteFile(c.Procs(), []byte(strconv.Itoa(pid)), 0); err != nil {
		t.Fatalf("move pid %d into %s: %v", pid, c.dir, err)
	}
}

// Procs is the cgroup's cgroup.procs file: a process that writes its pid
// there enters the container, as a runtime's does before it execs the
// container's program.
func (c *Cgroup) Procs() string { return filepath.Join(c.dir, "cgroup.procs") }

// mount finds the cgroup v2 hierarchy: /sys/fs/cgroup on a unified host,
// /sys/fs/cgroup/unified on a hybrid one.
func mount() (string, error) {
	for _, dir := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		var st unix.Statfs_t
		if unix.Statfs(dir, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			return dir, nil
		}
	}
	return "", errors.New("no cgroup v2 hierarchy at /sys/fs/cgroup or /sys/fs/cgroup/unified")
}
