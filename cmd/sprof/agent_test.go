package main

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/sprof/sprof/exporters"
	"github.com/sprof/sprof/internal/testenv"
)

// TestAgentUsageErrors: each bad command line is refused before anything
// is loaded, with exit status 2 — a secret on the command line first of
// all.
func TestAgentUsageErrors(t *testing.T) {
	url := "--pyroscope-url=http://127.0.0.1:4040"
	tests := []struct {
		args []string
		want string
	}{
		{[]string{url, "--token", "s3cret"}, "--token: secrets on the command line"},
		{[]string{url, "--password=s3cret"}, "--password: secrets on the command line"},
		{[]string{}, "profiles must go somewhere"},
		{[]string{url, "--interval", "100ms"}, "--interval 100ms: must be at least 1s"},
		{[]string{url, "-F", "0"}, "--frequency 0"},
		{[]string{url, "--label", "env"}, `--label: "env" is not name=value`},
		{[]string{url, "--label", "a=1", "--label", "a=2"}, `"a" given twice`},
		{[]string{url, "--label", "__name__=x"}, `label "__name__"`},
		{[]string{url, "--label", "service_name=x"}, "set it with its own option"},
		{[]string{"--pyroscope-url", "pyroscope:4040"}, "want http:// or https://"},
		{[]string{url, "--pyroscope-api", "grpc"}, "unknown Pyroscope API"},
		{[]string{url, "--process-root", "tree"}, "--process-root"},
		{[]string{url, "--queue", "0"}, "--queue 0"},
		{[]string{"--output-dir", "/tmp", "--label", "a=1"}, "give --pyroscope-url too"},
		{[]string{url, "-U", "-K"}, "exclude each other"},
		{[]string{url, "extra"}, `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		code, _, errs := runSprof(append([]string{"agent"}, tt.args...)...)
		first, _, _ := strings.Cut(errs, "\n")
		if code != 2 || !strings.Contains(first, tt.want) {
			t.Errorf("agent %v: exit %d, first line %q; want exit 2 and %q", tt.args, code, first, tt.want)
		}
		if strings.Contains(errs, "s3cret") {
			t.Errorf("agent %v: the secret is echoed: %q", tt.args, errs)
		}
	}
}

func TestAgentOptions(t *testing.T) {
	e := &env{strings.NewReader(""), &bytes.Buffer{}, &bytes.Buffer{}}
	o, err := parseAgent(e, []string{"--pyroscope-url", "https://p.example", "--label", "env=prod", "--label", "team=sre",
		"--host", "node-7", "--service-name", "fleet", "--interval", "30s", "--tenant-id", "t1"})
	if err != nil {
		t.Fatal(err)
	}
	if o.frequency != 19 || o.interval != 30*time.Second || o.processRoot != exporters.CommRoot || o.queue != 20 {
		t.Errorf("frequency %d, interval %v, process root %v, queue %d", o.frequency, o.interval, o.processRoot, o.queue)
	}
	p := o.pyroscope
	if p.Host != "node-7" || p.TenantID != "t1" || p.Labels["env"] != "prod" || p.Labels["team"] != "sre" || p.API != "push" {
		t.Errorf("pyroscope config %+v", p)
	}
	o, err = parseAgent(e, []string{"--output-dir", "/var/lib/sprof"})
	if err != nil || o.pyroscope != nil || o.processRoot != exporters.NoProcessRoot || o.interval != 15*time.Second {
		t.Errorf("output only: %+v, %v", o, err)
	}
}

// freeAddr returns a loopback address with a port nobody listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// syncBuffer is a bytes.Buffer safe to read while the agent logs to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestAgentSignals runs `sprof agent` in-process and sends it real
// signals: SIGHUP re-creates a removed output directory, SIGTERM writes
// the interval under way and exits 0.
func TestAgentSignals(t *testing.T) {
	testenv.RequireRoot(t)
	dir := filepath.Join(t.TempDir(), "out")
	addr := freeAddr(t)
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(&env{strings.NewReader(""), &bytes.Buffer{}, &stderr},
			[]string{"agent", "--interval", "1s", "--output-dir", dir, "--metrics-addr", addr, "-F", "49"})
	}()
	// The metrics endpoint answers once the signal handlers are in place.
	wait := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
			select {
			case code := <-done:
				t.Fatalf("sprof agent exited with %d while waiting for %s: %s", code, what, stderr.String())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("waiting for %s: %s", what, stderr.String())
			}
		}
	}
	wait("the metrics endpoint", func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	wait("the output directory again", func() bool { _, err := os.Stat(dir); return err == nil })

	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("sprof agent did not exit 20 s after SIGTERM")
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.pb.gz"))
	if len(files) == 0 {
		t.Fatalf("no profile written at SIGTERM: %s", stderr.String())
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := profile.ParseData(b); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	if log := stderr.String(); !strings.Contains(log, "profiling every process") || !strings.Contains(log, "reloaded") {
		t.Errorf("log: %s", log)
	}
}
