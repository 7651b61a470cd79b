package symbolize

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sprof/sprof/internal/testenv"
	"github.com/sprof/sprof/stacks"
	"github.com/sprof/sprof/symbolize/debuginfod"
)

// startDebuginfod runs Debian's debuginfod (elfutils) on 127.0.0.1,
// serving the ELF files of dir, and waits until it has indexed the debug
// file of build ID id. It returns the server's URL.
func startDebuginfod(t *testing.T, dir, id string) string {
	t.Helper()
	testenv.RequireTool(t, "debuginfod")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	var log strings.Builder
	cmd := exec.Command("debuginfod", "-F", "-d", filepath.Join(t.TempDir(), "db.sqlite"), "-p", fmt.Sprint(port), "-t", "0", "-g", "0", "--disable-source-scan", dir)
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	// Indexing takes a second on a quiet machine and far longer on one
	// running every package's tests at once.
	start := time.Now()
	for deadline := start.Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get(url + "/buildid/" + id + "/debuginfo")
		if err == nil {
			resp.Body.Close() // debuginfod serves GET only
			if resp.StatusCode == http.StatusOK {
				t.Logf("debuginfod indexed %s in %v", dir, time.Since(start).Round(time.Millisecond))
				return url
			}
		}
	}
	t.Fatalf("debuginfod did not index %s within 90 s:\n%s", dir, log.String())
	return ""
}

// TestGSYMDebuginfod symbolizes a stripped binary whose debug file is only
// on a debuginfod server: the frames, inline stacks and lines are those of
// a symbolizer that finds the debug file on disk, the file is fetched once
// into the cache, and an unknown build ID is a miss remembered even after
// the server is gone.
func TestGSYMDebuginfod(t *testing.T) {
	id, err := buildIDOf(fixture("c-stripped"))
	if err != nil {
		t.Fatal(err)
	}
	served := t.TempDir()
	copyFile(t, filepath.Join(fixture("debug"), ".build-id", id[:2], id[2:]+".debug"), filepath.Join(served, "c-stripped.debug"))
	url := startDebuginfod(t, served, id)

	cache := t.TempDir()
	client := &debuginfod.Client{URLs: []string{url}, Timeout: time.Minute}
	g, err := NewGSYM(GSYMOptions{Options: Options{DebugDirs: []string{t.TempDir()}}, CacheDir: cache, Debuginfod: client})
	if err != nil {
		t.Fatal(err)
	}
	local, err := NewGSYM(GSYMOptions{Options: Options{DebugDirs: []string{fixture("debug")}}, CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	loads := readelfLoads(t, fixture("c-stripped"))
	b := Binary{Path: fixture("c-stripped"), BuildID: id}
	var got, want []stacks.Frame
	withLines := 0
	for _, p := range probes(nmCode(t, fixture("c-O2")), 0) {
		off, ok := fileOffset(loads, p.addr)
		if !ok {
			continue
		}
		if got, err = g.Symbolize(got[:0], b, off); err != nil {
			t.Fatal(err)
		}
		if want, err = local.Symbolize(want[:0], b, off); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%#x: with debuginfod %v, with the debug file on disk %v", p.addr, got, want)
		}
		if len(got) > 0 && got[0].Line > 0 {
			withLines++
		}
	}
	if withLines < 20 {
		t.Errorf("only %d addresses have lines", withLines)
	}
	fetched := filepath.Join(cache, "debuginfod", ".build-id", id[:2], id[2:]+".debug")
	if _, err := os.Stat(fetched); err != nil {
		t.Errorf("fetched file not in the cache: %v", err)
	}
	if st := g.Stats(); st.Converted != 1 {
		t.Errorf("stats %+v, want one conversion", st)
	}

	c := *client
	c.Dir = filepath.Join(cache, "debuginfod")
	unknown := strings.Repeat("ab", 20)
	if _, err := c.Fetch(context.Background(), unknown); !errors.Is(err, debuginfod.ErrNotFound) {
		t.Fatalf("unknown build ID: %v, want ErrNotFound", err)
	}
	// The server is gone: the miss and the fetched file are answered
	// from the cache.
	c.URLs = []string{"http://127.0.0.1:1"}
	if _, err := c.Fetch(context.Background(), unknown); !errors.Is(err, debuginfod.ErrNotFound) {
		t.Errorf("unknown build ID again: %v, want the remembered miss", err)
	}
	if p, err := c.Fetch(context.Background(), id); err != nil || p != fetched {
		t.Errorf("known build ID again: %q, %v", p, err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestGSYMPartial: a binary whose debug file no server has is converted
// without it (symbols only) into a file kept apart, used while the miss is
// remembered, and converted again, whole, once a server has the file.
func TestGSYMPartial(t *testing.T) {
	needTool(t, "objcopy")
	bin := filepath.Join(t.TempDir(), "c-symbols-only")
	run(t, "", "objcopy", "--strip-debug", fixture("c-O2"), bin)
	id, err := buildIDOf(bin)
	if err != nil {
		t.Fatal(err)
	}
	debug, err := os.ReadFile(filepath.Join(fixture("debug"), ".build-id", id[:2], id[2:]+".debug"))
	if err != nil {
		t.Fatal(err)
	}
	var has atomic.Bool
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if !has.Load() {
			http.NotFound(w, r)
			return
		}
		w.Write(debug)
	}))
	defer srv.Close()
	cache := t.TempDir()
	b := Binary{Path: bin, BuildID: id}
	off := uint64(0x1081) // in main: file offsets are addresses in its text
	symbolize := func(ttl time.Duration) ([]stacks.Frame, GSYMStats) {
		g, err := NewGSYM(GSYMOptions{
			Options:    Options{DebugDirs: []string{t.TempDir()}},
			CacheDir:   cache,
			Debuginfod: &debuginfod.Client{URLs: []string{srv.URL}, MissTTL: ttl},
		})
		if err != nil {
			t.Fatal(err)
		}
		frames, err := g.Symbolize(nil, b, off)
		if err != nil {
			t.Fatal(err)
		}
		return frames, g.Stats()
	}
	first, st := symbolize(time.Hour)
	partial := filepath.Join(cache, "gsym", id+".partial.gsym")
	if st != (GSYMStats{Converted: 1}) || !exists(partial) || len(first) != 1 || first[0].Function != "main" || first[0].Line != 0 {
		t.Fatalf("no debug file: stats %+v, frames %v", st, first)
	}
	has.Store(true)
	if again, st := symbolize(time.Hour); st != (GSYMStats{Reused: 1}) || !slices.Equal(again, first) || requests.Load() != 1 {
		t.Errorf("miss remembered: stats %+v, %d requests, frames %v", st, requests.Load(), again)
	}
	whole, st := symbolize(time.Nanosecond)
	if st != (GSYMStats{Converted: 1}) || !exists(filepath.Join(cache, "gsym", id+".gsym")) {
		t.Errorf("miss forgotten: stats %+v, want a whole conversion", st)
	}
	if len(whole) == 0 || whole[0].Line == 0 || whole[len(whole)-1].Function != "main" {
		t.Errorf("without the debug file %v, with it %v", first, whole)
	}
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
