package exporters

import (
	"context"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sprof/sprof/internal/testenv"
)

// TestPprofWebFlameGraph opens our profile the way users do, with
// `go tool pprof -http`, and reads the flame graph page: every function
// must be in it by name, and every unsymbolized address by its
// placeholder — pprof's flame graph silently drops frames without a name.
func TestPprofWebFlameGraph(t *testing.T) {
	goBin := testenv.RequireTool(t, "go")
	path, _ := writeFixturePprof(t, Options{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "tool", "pprof", "-http="+addr, "-no_browser", "-symbolize=none", path)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		cmd.Wait()
	}()

	var page string
	for page == "" {
		resp, err := http.Get("http://" + addr + "/ui/flamegraph")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET /ui/flamegraph: %s\n%s", resp.Status, body)
			}
			page = string(body)
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("go tool pprof -http did not answer: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	for _, want := range []string{"main", "work(int)", "hash", "ksys_write", "entry_SYSCALL_64", "[truncated]", "[kernel] 0xffffffffc0001234",
		"libc.so.6+0x3a345", "[unknown] 0x12345678"} {
		if !strings.Contains(page, want) {
			t.Errorf("the flame graph page lacks %q", want)
		}
	}
}
