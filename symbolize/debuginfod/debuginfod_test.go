package debuginfod

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sprof/sprof/symbolize/buildid"
)

// elfFile is a fixture ELF file and its build ID.
func elfFile(t *testing.T) ([]byte, string) {
	t.Helper()
	p := "../../testdata/symbolize/c-O2"
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	id, err := buildid.File(p)
	if err != nil {
		t.Fatal(err)
	}
	return b, id
}

// TestHostileServers: what a server sends is kept only when it is a file
// of the build ID asked for, within the size cap and the timeout, and only
// a 404 is remembered as a miss.
func TestHostileServers(t *testing.T) {
	file, id := elfFile(t)
	other := strings.Repeat("cd", 20)
	for _, tc := range []struct {
		name    string
		id      string
		handler http.HandlerFunc
		client  Client
		miss    bool // ErrNotFound, remembered
	}{
		{"wrong build ID", other, func(w http.ResponseWriter, r *http.Request) { w.Write(file) }, Client{}, false},
		{"over the cap", id, func(w http.ResponseWriter, r *http.Request) { w.Write(file) }, Client{MaxBytes: int64(len(file)) - 1}, false},
		{"declared over the cap", id, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "1000000")
			w.Write(file[:100])
		}, Client{MaxBytes: 1000}, false},
		{"too slow", id, func(w http.ResponseWriter, r *http.Request) {
			w.Write(file[:100])
			w.(http.Flusher).Flush()
			select {
			case <-time.After(5 * time.Second):
			case <-r.Context().Done():
			}
		}, Client{Timeout: 200 * time.Millisecond}, false},
		{"server error", id, func(w http.ResponseWriter, r *http.Request) { http.Error(w, "busy", http.StatusServiceUnavailable) }, Client{}, false},
		{"not found", id, func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) }, Client{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var requests atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				requests.Add(1)
				if r.URL.Path != "/buildid/"+tc.id+"/debuginfo" {
					t.Errorf("asked for %s", r.URL.Path)
				}
				tc.handler(w, r)
			}))
			defer srv.Close()
			c := tc.client
			c.URLs, c.Dir = []string{srv.URL}, t.TempDir()
			for range 2 {
				p, err := c.Fetch(context.Background(), tc.id)
				if err == nil || errors.Is(err, ErrNotFound) != tc.miss {
					t.Fatalf("Fetch = %q, %v; want a miss: %v", p, err, tc.miss)
				}
			}
			want := int32(2)
			if tc.miss {
				want = 1
			}
			if n := requests.Load(); n != want {
				t.Errorf("%d requests for two fetches, want %d", n, want)
			}
			left, _ := filepath.Glob(filepath.Join(c.Dir, ".build-id", "*", "*.debug"))
			tmps, _ := filepath.Glob(filepath.Join(c.Dir, ".build-id", "*", ".*"))
			if len(left)+len(tmps) > 0 {
				t.Errorf("files left: %q %q", left, tmps)
			}
		})
	}
}

// TestFetch downloads a file once and answers from Dir afterwards, trying
// servers in order.
func TestFetch(t *testing.T) {
	file, id := elfFile(t)
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Write(file)
	}))
	defer srv.Close()
	down := httptest.NewServer(http.NotFoundHandler())
	defer down.Close()
	c := Client{URLs: []string{down.URL, srv.URL + "/"}, Dir: t.TempDir()}
	for range 2 {
		p, err := c.Fetch(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := buildid.File(p); err != nil || got != id {
			t.Fatalf("%s: build ID %q, %v", p, got, err)
		}
	}
	if n := requests.Load(); n != 1 {
		t.Errorf("%d downloads, want 1", n)
	}
	if _, err := c.Fetch(context.Background(), "../../etc"); err == nil {
		t.Error("a build ID that is not hex was accepted")
	}
}
