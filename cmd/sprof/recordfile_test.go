package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sprof/sprof/cbf/recording"
	"github.com/sprof/sprof/internal/testenv"
)

// buildSprof builds the sprof binary for tests that run it as a process.
func buildSprof(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sprof")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build sprof: %v\n%s", err, out)
	}
	return bin
}

// TestRecordingSurvivesKill records the host with the real binary while a
// program spins, kills sprof with SIGKILL, and checks that `sprof info`
// reads the file up to the last second before the kill.
func TestRecordingSurvivesKill(t *testing.T) {
	testenv.RequireRoot(t)
	bin := buildSprof(t)
	spin := exec.Command("../../testdata/e2e/spin", "10")
	if err := spin.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { spin.Process.Kill(); spin.Wait() }()

	out := filepath.Join(t.TempDir(), "x.sprof")
	ready := make(chan struct{})
	stderr := &startWatch{ready: ready}
	sprof := exec.Command(bin, "record", "-F", "499", "-d", "1m", "-o", out)
	sprof.Stderr = struct{ io.Writer }{stderr} // not its ReadFrom, which would read to the end
	if err := sprof.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		sprof.Process.Kill()
		t.Fatalf("sprof did not start sampling: %s", stderr.String())
	}
	// Kill once the file holds 500 samples: at 499 Hz on every CPU that
	// is about a second of a spinning CPU, and a loaded machine may start
	// the drain later than sprof says "sampling".
	time.Sleep(3 * time.Second)
	waitFrom := time.Now()
	for deadline := waitFrom.Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if s, err := recording.Summarize(bytes.NewReader(data)); err == nil && s.Samples >= 500 {
			break
		}
		if time.Now().After(deadline) {
			sprof.Process.Kill()
			t.Fatalf("the recording holds fewer than 500 samples 30 s after sprof began sampling: %s", stderr.String())
		}
	}
	killed := time.Now()
	t.Logf("500 samples in the file %v after the first 3 s of sampling", killed.Sub(waitFrom).Round(time.Millisecond))
	if err := sprof.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	sprof.Wait()

	info, err := exec.Command(bin, "info", out).CombinedOutput()
	if err != nil {
		t.Fatalf("sprof info: %v\n%s", err, info)
	}
	t.Logf("sprof info:\n%s", info)
	if !strings.Contains(string(info), "end           none") && !strings.Contains(string(info), "end           none: cut short") {
		t.Errorf("sprof info does not say the recording was cut")
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	s, err := recording.Summarize(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	last := s.Header.Start.Add(s.LastSample)
	// The writer completes a chunk every second from samples drained every
	// 250 ms; a loaded host (make test runs packages side by side) delays
	// both by a few hundred ms more: 1.53 s was seen in a make test run.
	if s.Samples < 500 || killed.Sub(last) > 2*time.Second {
		t.Errorf("%d samples, the last %v before the kill; want ≥ 500 and at most a second (plus a drain and scheduling delays) old",
			s.Samples, killed.Sub(last))
	}
}

// TestRecordingDiskFull records the host into a 64 KiB tmpfs: the write
// that finds the disk full ends the recording then, with an error that
// names the user's path, and what was written stays readable.
func TestRecordingDiskFull(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
		testenv.Unavailable(t, "mount a tmpfs: "+err.Error())
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	startSpin(t, "600")
	out := filepath.Join(dir, "x.sprof")
	done := make(chan struct{})
	var code int
	var errs string
	go func() {
		code, _, errs = runSprof("record", "-F", "999", "-d", "10m", "-o", out)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		t.Fatal("sprof records on into a full disk")
	}
	t.Logf("stderr:\n%s", errs)
	want := "sprof record: write " + out + ": no space left on device; the recording ended then"
	if code != 1 || !strings.Contains(errs, want) {
		t.Errorf("exit %d; want 1 and an error saying %q", code, want)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	s, err := recording.Summarize(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("the recording is not readable: %v", err)
	}
	if s.Samples == 0 {
		t.Errorf("the recording holds no samples (%d bytes)", len(data))
	}
}
