package main

import (
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sprof/sprof/cbf/recording"
	"github.com/sprof/sprof/internal/outfile"
	"github.com/sprof/sprof/internal/testenv"
)

// TestRecordingKernelBuildID checks the kernel image of a recording made
// on this host against perf's build ID of the running kernel (perf
// buildid-list -k), which perf reads with code of its own.
func TestRecordingKernelBuildID(t *testing.T) {
	perf := testenv.RequireTool(t, "perf")
	out, err := exec.Command(perf, "buildid-list", "-k").Output()
	if err != nil {
		testenv.Unavailable(t, "perf buildid-list -k: "+err.Error())
	}
	want := strings.TrimSpace(string(out))
	path := filepath.Join(t.TempDir(), "k.sprof")
	of, err := outfile.Create(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := newRecording(of, 99)
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.close(0); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := recording.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	for {
		c, err := r.Next()
		if err != nil {
			t.Fatalf("no kernel record: %v", err)
		}
		for _, pr := range c.Processes() {
			if !pr.Kernel {
				continue
			}
			images := pr.Map.Images()
			if len(images) != 1 || images[0].Path != "[kernel.kallsyms]" || hex.EncodeToString(images[0].BuildID) != want {
				t.Errorf("kernel images %+v; want [kernel.kallsyms] with build ID %s", images, want)
			}
			return
		}
	}
}
