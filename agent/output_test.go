package agent

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/sprof/sprof/exporters"
	"github.com/sprof/sprof/exporters/pyroscope"
	"github.com/sprof/sprof/stacks"
)

// TestOutputRotation: each interval leaves one pprof file per service,
// named by time and service and readable by pprof; only the newest Keep
// intervals stay, and files the agent did not write are left alone. After
// the directory is removed, a reload (SIGHUP) makes it again.
func TestOutputRotation(t *testing.T) {
	out := filepath.Join(t.TempDir(), "profiles")
	a, err := New(&fakeRecorder{}, Config{Interval: 60 * time.Millisecond, DrainEvery: 20 * time.Millisecond, ProcRoot: fakeProc(t),
		OutputDir: out, Keep: 2, ProcessRoot: exporters.CommRoot})
	if err != nil {
		t.Fatal(err)
	}
	foreign := []string{"notes.txt", "20200101T000000.000Z_old.txt", "x_web.pb.gz"}
	for _, name := range foreign {
		if err := os.WriteFile(filepath.Join(out, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stop := start(t, a)
	waitFor(t, "five intervals", 5*time.Second, func() bool { return a.metrics.filesWritten.Load() >= 10 })
	if n := a.metrics.fileErrors.Load(); n != 0 {
		t.Errorf("%d file errors", n)
	}

	if err := os.RemoveAll(out); err != nil {
		t.Fatal(err)
	}
	written := a.metrics.filesWritten.Load()
	a.Reload()
	waitFor(t, "files after the reload", 5*time.Second, func() bool { return a.metrics.filesWritten.Load() >= written+6 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	stamps := map[string]bool{}
	threads := map[string][]string{"web": {"web", "worker"}, "db": {"db-io"}}
	for _, e := range ents {
		names = append(names, e.Name())
		stamp, _, _ := strings.Cut(e.Name(), "_")
		stamps[stamp] = true
		p := readPprof(t, filepath.Join(out, e.Name()))
		service := strings.TrimSuffix(e.Name()[len(stamp)+1:], fileSuffix)
		// The root frame names the sampled thread (exporters.CommRoot).
		if root := rootFunction(p); !slices.Contains(threads[service], root) {
			t.Errorf("%s: root frame %q, want one of %q", e.Name(), root, threads[service])
		}
	}
	if len(names) != 4 || len(stamps) != 2 {
		t.Fatalf("files %q; want db and web of the 2 newest intervals", names)
	}
}

func TestRotateLeavesForeignFiles(t *testing.T) {
	dir := t.TempDir()
	o := &outputDir{dir: dir, keep: 1}
	names := []string{"20260101T000000.000Z_a.pb.gz", "20260101T000015.000Z_a.pb.gz", "20260101T000015.000Z_b.pb.gz",
		"notes.txt", "2026_a.pb.gz", ".20250101T000000.000Z_a.pb.gz.123"}
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := o.rotate(); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	want := slices.Clone(names[1:])
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("after rotation: %q, want %q", got, want)
	}
}

func readPprof(t *testing.T, path string) *profile.Profile {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if err := exporters.CheckPprof(p); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return p
}

// rootFunction is the outermost function of p's first sample.
func rootFunction(p *profile.Profile) string {
	s := p.Sample[0]
	l := s.Location[len(s.Location)-1]
	return l.Line[len(l.Line)-1].Function.Name
}

func TestFileSafe(t *testing.T) {
	for in, want := range map[string]string{
		"web": "web", "a/b c": "a_b_c", ".hidden": "_hidden", "v1.2-x_y": "v1.2-x_y", "ünï": "__n__",
	} {
		if got := fileSafe(in); got != want {
			t.Errorf("fileSafe(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestOutputContainers: a container's series has a file of its own, named
// with the short container ID, whose samples carry the whole ID.
func TestOutputContainers(t *testing.T) {
	const id = "4f797c539e6c745de61a93ca3ff892358ecbcaccd8414d5db545c38428142970"
	dir := t.TempDir()
	o := &outputDir{dir: dir, keep: 1}
	start := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	sample := func(container string) *stacks.Profile {
		return &stacks.Profile{Start: start, Duration: time.Second, Period: time.Second / 19,
			Samples: []*stacks.Sample{{Pid: 1, Tid: 1, Comm: "web", Container: container, Count: 1}}}
	}
	n, errs := o.write(start, []pyroscope.Series{{Service: "web", Profile: sample("")}, {Service: "web", Container: id, Profile: sample(id)}})
	if n != 2 || errs != nil {
		t.Fatalf("wrote %d files: %v", n, errs)
	}
	for name, want := range map[string][]string{"20261122T100000.000Z_web.pb.gz": nil, "20261122T100000.000Z_web_4f797c539e6c.pb.gz": {id}} {
		p := readPprof(t, filepath.Join(dir, name))
		if got := p.Sample[0].Label["container_id"]; !slices.Equal(got, want) {
			t.Errorf("%s: container_id %q; want %q", name, got, want)
		}
	}
}
