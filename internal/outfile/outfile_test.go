package outfile

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// write creates path, writes s and commits, failing t on any error.
func write(t *testing.T, path, s string) {
	t.Helper()
	f, err := Create(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Abort()
	if _, err := io.WriteString(f, s); err != nil {
		t.Fatal(err)
	}
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// noTemporaries fails t if dir holds a file whose name starts with ".".
func noTemporaries(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("temporary file %s left in %s", e.Name(), dir)
		}
	}
}

func TestNewAndRegularFiles(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "cpu.folded")
	write(t, p, "one")
	if st, err := os.Stat(p); err != nil || st.Mode() != 0o644 {
		t.Fatalf("new file: %v, %v; want mode 0644", st.Mode(), err)
	}
	os.Chmod(p, 0o600)
	write(t, p, "two")
	if got := readFile(t, p); got != "two" {
		t.Errorf("replaced file holds %q, want two", got)
	}
	if st, _ := os.Stat(p); st.Mode() != 0o600 {
		t.Errorf("replaced file has mode %v, want the old one, 0600", st.Mode())
	}
	// Aborted: the old file stays whole.
	f, err := Create(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(f, "partial")
	f.Abort()
	if got := readFile(t, p); got != "two" {
		t.Errorf("after an aborted write the file holds %q, want two", got)
	}
	noTemporaries(t, dir)
}

func TestSymlinksAreWrittenThrough(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "real.folded")
	os.WriteFile(target, []byte("old"), 0o644)
	link := filepath.Join(dir, "link.folded")
	if err := os.Symlink("real.folded", link); err != nil {
		t.Fatal(err)
	}
	// A chain, and a link to a file not there yet.
	chain := filepath.Join(dir, "chain.folded")
	os.Symlink(link, chain)
	dangling := filepath.Join(dir, "dangling.folded")
	os.Symlink("new.folded", dangling)

	write(t, chain, "new")
	write(t, dangling, "created")
	for _, l := range []string{link, chain, dangling} {
		if st, err := os.Lstat(l); err != nil || st.Mode()&fs.ModeSymlink == 0 {
			t.Errorf("%s is no longer a symlink: %v %v", l, st.Mode(), err)
		}
	}
	if got := readFile(t, target); got != "new" {
		t.Errorf("symlink target holds %q, want new", got)
	}
	if got := readFile(t, filepath.Join(dir, "new.folded")); got != "created" {
		t.Errorf("dangling symlink's target holds %q, want created", got)
	}
	noTemporaries(t, dir)
}

func TestDevicesAndFIFOsAreWrittenDirectly(t *testing.T) {
	f, err := Create("/dev/null", nil)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(f, "discarded")
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat("/dev/null"); err != nil || st.Mode()&fs.ModeCharDevice == 0 {
		t.Fatalf("/dev/null is %v after writing (%v)", st.Mode(), err)
	}

	fifo := filepath.Join(t.TempDir(), "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	got := make(chan string)
	go func() {
		r, err := os.Open(fifo) // waits for the writer
		if err != nil {
			got <- err.Error()
			return
		}
		b, _ := io.ReadAll(r)
		r.Close()
		got <- string(b)
	}()
	write(t, fifo, "through the pipe")
	if s := <-got; s != "through the pipe" {
		t.Errorf("FIFO reader got %q", s)
	}
	if st, err := os.Lstat(fifo); err != nil || st.Mode()&fs.ModeNamedPipe == 0 {
		t.Errorf("the FIFO is %v after writing (%v)", st.Mode(), err)
	}
}

func TestStdout(t *testing.T) {
	var out bytes.Buffer
	f, err := Create("-", &out)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(f, "profile")
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	if out.String() != "profile" || f.Name() != "standard output" {
		t.Errorf("wrote %q to %s", out.String(), f.Name())
	}
	if _, err := os.Lstat("-"); err == nil {
		t.Error(`a file named "-" was created`)
	}
}

func TestRefusals(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ path, want string }{
		{dir, dir + " is a directory"},
		{"/nonexistent/dir/cpu.pb.gz", "create /nonexistent/dir/cpu.pb.gz: no such file or directory"},
	} {
		_, err := Create(tc.path, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "/.") {
			t.Errorf("Create(%s) = %v, want an error saying %q and no temporary name", tc.path, err, tc.want)
		}
	}
	noTemporaries(t, dir)
}

// A write error names the user's path and sticks.
func TestWriteErrorNamesThePath(t *testing.T) {
	f, err := Create("/dev/full", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Abort()
	_, err = io.WriteString(f, "x")
	if !errors.Is(err, syscall.ENOSPC) || err.Error() != "write /dev/full: no space left on device" {
		t.Fatalf("write to /dev/full: %v", err)
	}
	if _, err2 := io.WriteString(f, "y"); err2 != err {
		t.Errorf("second write: %v, want the first error again", err2)
	}
	if cerr := f.Commit(); cerr != err {
		t.Errorf("Commit: %v, want the write error", cerr)
	}
}

func TestPublish(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "cpu.sprof")
	os.WriteFile(p, []byte("old recording"), 0o644)
	f, err := Create(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Abort()
	io.WriteString(f, "head ")
	if got := readFile(t, p); got != "old recording" {
		t.Errorf("before Publish the path holds %q, want the old file", got)
	}
	if err := f.Publish(); err != nil {
		t.Fatal(err)
	}
	io.WriteString(f, "tail")
	f.Abort() // as a run that failed after sampling: what was written stays
	if got := readFile(t, p); got != "head tail" {
		t.Errorf("published file holds %q, want %q", got, "head tail")
	}
	noTemporaries(t, dir)
}
