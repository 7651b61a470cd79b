package main

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestReportOutputs writes a report to each kind of output path: standard
// output, a symlink, a FIFO, a directory that is not there. Whatever is at
// the path stays what it was; only a regular file is replaced.
func TestReportOutputs(t *testing.T) {
	dir := t.TempDir()
	rec := filepath.Join(dir, "cinline.sprof")
	writeCinlineRecording(t, rec, 0x555555554000, []uint64{0x1215, 0x1278, 0x1280})
	report := func(out string, args ...string) (int, string, string) {
		return runSprof(append([]string{"report", rec, "--symbolizer", "elf", "-o", out}, args...)...)
	}

	t.Run("stdout", func(t *testing.T) {
		for _, format := range []string{"folded", "pprof", "svg", "speedscope"} {
			code, stdout, errs := report("-", "--format", format)
			if code != 0 || len(stdout) == 0 || !strings.Contains(errs, "wrote standard output ("+format+")") {
				t.Errorf("-o - --format %s: exit %d, %d bytes on stdout, stderr:\n%s", format, code, len(stdout), errs)
			}
			if format == "folded" && !strings.HasSuffix(stdout, " 3\n") && strings.Count(stdout, "\n") != 3 {
				t.Errorf("-o - --format folded wrote %q, want the 3 samples", stdout)
			}
		}
		if _, err := os.Lstat("-"); err == nil {
			os.Remove("-")
			t.Errorf(`-o - created a file named "-"`)
		}
		code, _, errs := report("-")
		if code != 2 || !strings.Contains(errs, "--format") {
			t.Errorf("-o - without --format: exit %d, %q; want a usage error that asks for --format", code, errs)
		}
	})

	t.Run("symlink", func(t *testing.T) {
		target := filepath.Join(dir, "real.folded")
		link := filepath.Join(dir, "link.folded")
		os.WriteFile(target, []byte("old"), 0o644)
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		if code, _, errs := report(link); code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		if st, err := os.Lstat(link); err != nil || st.Mode()&fs.ModeSymlink == 0 {
			t.Errorf("the symlink was replaced: %v %v", st.Mode(), err)
		}
		if b, _ := os.ReadFile(target); !strings.HasSuffix(string(b), " 1\n") {
			t.Errorf("the symlink's target holds %q, want the folded profile", b)
		}
	})

	t.Run("FIFO", func(t *testing.T) {
		fifo := filepath.Join(dir, "pipe.folded")
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		got := make(chan string)
		go func() {
			r, err := os.Open(fifo)
			if err != nil {
				got <- err.Error()
				return
			}
			b, _ := io.ReadAll(r)
			r.Close()
			got <- string(b)
		}()
		code, _, errs := report(fifo)
		if s := <-got; code != 0 || strings.Count(s, "\n") != 3 {
			t.Errorf("exit %d, the FIFO's reader got %q: %s", code, s, errs)
		}
		if st, err := os.Lstat(fifo); err != nil || st.Mode()&fs.ModeNamedPipe == 0 {
			t.Errorf("the FIFO was replaced: %v %v", st.Mode(), err)
		}
	})

	t.Run("missing directory", func(t *testing.T) {
		out := filepath.Join(dir, "nonexistent", "x.pb.gz")
		code, _, errs := report(out)
		want := "sprof report: create " + out + ": no such file or directory\n"
		if code != 1 || !strings.HasSuffix(errs, want) {
			t.Errorf("exit %d, stderr %q; want exit 1 and %q", code, errs, want)
		}
	})
}
