package main

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/sprof/sprof/agent"
	"github.com/sprof/sprof/bpf"
	"github.com/sprof/sprof/collector"
	"github.com/sprof/sprof/exporters"
	"github.com/sprof/sprof/internal/testenv"
	"github.com/sprof/sprof/pipeline"
)

// TestAgentUsageErrors: each bad command line is refused before anything
// is loaded, with exit status 2 — a secret on the command line first of
// all.
func TestAgentUsageErrors(t *testing.T) {
	url := "--pyroscope-url=http://127.0.0.1:4040"
	otlpURL := "--otlp-endpoint=http://127.0.0.1:4317"
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
		{[]string{url, "--keep", "x"}, `invalid argument "x" for "--keep" flag: want a whole number`},
		{[]string{url, "--queue", "99999999999999999999"}, `for "--queue" flag: want a whole number`},
		{[]string{"--output-dir", "/tmp", "--label", "a=1"}, "give --pyroscope-url too"},
		{[]string{url, "-U", "-K"}, "exclude each other"},
		{[]string{url, "extra"}, `unexpected argument "extra"`},
		{[]string{url, "--symbol-cache", "64K"}, "--symbol-cache 65536: give at least 1M"},
		{[]string{url, "--ingestion-rate-limit", "4MB/s"}, `invalid argument "4MB/s" for "--ingestion-rate-limit" flag`},
		{[]string{url, "--ingestion-burst", "1K"}, "--ingestion-burst 1024: give at least 64K"},
		{[]string{url, "--symbolizer", "dwarf"}, `--symbolizer "dwarf": one of gsym, elf`},
		{[]string{"--otlp-endpoint", "collector:4317"}, "want http:// or https://"},
		{[]string{otlpURL, "--otlp-protocol", "thrift"}, "--otlp-protocol"},
		{[]string{otlpURL, "--otlp-header", "nokv"}, `--otlp-header "nokv": want name=value`},
		{[]string{otlpURL, "--otlp-header", "Authorization=Bearer s3cret"}, "secrets on the command line"},
		{[]string{"--output-dir", "/tmp", "--otlp-header", "a=1"}, "give --otlp-endpoint too"},
		{[]string{otlpURL, "--otlp-ca-file", "/nonexistent"}, "use https://"},
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
	if o.symbolizer != (symbolizerFlags{kind: "gsym", cacheBytes: agent.DefaultSymbolCache}) || o.memoryLimit != agent.DefaultMemoryLimit {
		t.Errorf("symbolizer %+v; want gsym in the default directory and budget", o.symbolizer)
	}
	o, err = parseAgent(e, []string{"--output-dir", "/var/lib/sprof", "--symbolizer", "elf", "--cache-dir", "/srv/cache", "--symbol-cache", "64M"})
	if err != nil || o.pyroscope != nil || o.processRoot != exporters.NoProcessRoot || o.interval != 15*time.Second {
		t.Errorf("output only: %+v, %v", o, err)
	}
	if o.symbolizer != (symbolizerFlags{kind: "elf", cacheDir: "/srv/cache", cacheBytes: 64 << 20}) {
		t.Errorf("symbolizer %+v", o.symbolizer)
	}
}

// TestAgentIngestionLimit: the requests are paced to Pyroscope's default
// rate limit unless told the server's, and not at all with 0; the help
// says what the flags are and their defaults.
func TestAgentIngestionLimit(t *testing.T) {
	e := &env{strings.NewReader(""), &bytes.Buffer{}, &bytes.Buffer{}}
	for _, tc := range []struct {
		args  []string
		rate  float64
		burst int
	}{
		{nil, 4 << 20, 2 << 20},
		{[]string{"--ingestion-rate-limit", "40M", "--ingestion-burst", "20M"}, 40 << 20, 20 << 20},
		{[]string{"--ingestion-rate-limit", "0"}, -1, 2 << 20},
	} {
		o, err := parseAgent(e, append([]string{"--pyroscope-url", "http://p:4040"}, tc.args...))
		if err != nil {
			t.Fatal(err)
		}
		if o.pacing() != tc.rate || o.ingestionBurst != tc.burst {
			t.Errorf("%v: rate %v, burst %d; want %v, %d", tc.args, o.pacing(), o.ingestionBurst, tc.rate, tc.burst)
		}
	}
	_, out, _ := runSprof("agent", "--help")
	for _, want := range []string{"--ingestion-rate-limit size", "-distributor.ingestion-rate-limit-mb", "0 = no pacing (default 4M)",
		"--ingestion-burst size", "-distributor.ingestion-burst-size-mb", "(default 2M)"} {
		if !strings.Contains(out, want) {
			t.Errorf("agent --help lacks %q", want)
		}
	}
}

// TestAgentSamplesAsRecord: the agent takes record's sampling flags with
// record's defaults, stack copies on, so that programs without frame
// pointers show whole stacks in both.
func TestAgentSamplesAsRecord(t *testing.T) {
	e := &env{strings.NewReader(""), &bytes.Buffer{}, &bytes.Buffer{}}
	a, err := parseAgent(e, []string{"--output-dir", "/var/lib/sprof"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := parseRecord(e, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Only the memory for unwind tables differs: an agent lives for weeks.
	if a.sampling.unwindCache != agent.DefaultUnwindCache || r.sampling.unwindCache != collector.DefaultUnwindCacheBytes {
		t.Errorf("unwind caches: agent %d, record %d", a.sampling.unwindCache, r.sampling.unwindCache)
	}
	a.sampling.unwindCache = r.sampling.unwindCache
	if a.sampling != r.sampling || a.sampling.stackCopy != pipeline.DefaultStackCopy {
		t.Errorf("agent samples with %+v, record with %+v; want both with %d bytes of stack copy", a.sampling, r.sampling, pipeline.DefaultStackCopy)
	}
	a, err = parseAgent(e, []string{"--output-dir", "/var/lib/sprof", "--stack-copy", "0", "--debug-unwind", "-U", "--ring-buffer", "1M", "--unwind-cache", "8M"})
	if err != nil {
		t.Fatal(err)
	}
	if want := (samplingFlags{userOnly: true, offCPUMin: bpf.DefaultOffCPUMin, offCPUBudget: bpf.DefaultOffCPUExitBudget, unwind: "auto", unwindTables: bpf.DefaultUnwindTables, ringBuffer: 1 << 20, debugUnwind: true, unwindCache: 8 << 20, python: true}); a.sampling != want {
		t.Errorf("agent sampling %+v, want %+v", a.sampling, want)
	}
	if cfg := a.sampling.config(19); cfg.StackCopy != 0 || cfg.Kernel || !cfg.User || !cfg.DebugUnwind || cfg.RingBufferSize != 1<<20 || cfg.UnwindCache != 8<<20 {
		t.Errorf("pipeline config %+v", cfg)
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
	// Something to sample in every interval, the last one included.
	busy := exec.Command("/bin/sh", "-c", "while :; do :; done")
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		busy.Process.Kill()
		busy.Wait()
	}()
	dir := filepath.Join(t.TempDir(), "out")
	addr := freeAddr(t)
	var stderr syncBuffer
	done := make(chan int, 1)
	// Frame pointers only: this is about signals, and on a loaded host
	// the first intervals of a host-wide agent that also builds unwind
	// tables for every program can take longer than the waits below
	// (agent.TestAgentUnwindsWithoutFramePointers tests unwinding).
	go func() {
		done <- run(&env{strings.NewReader(""), &bytes.Buffer{}, &stderr},
			[]string{"agent", "--interval", "1s", "--output-dir", dir, "--metrics-addr", addr, "-F", "49", "--stack-copy", "0"})
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
	stamps := func() map[string]bool {
		files, _ := filepath.Glob(filepath.Join(dir, "*.pb.gz"))
		m := map[string]bool{}
		for _, f := range files {
			stamp, _, _ := strings.Cut(filepath.Base(f), "_")
			m[stamp] = true
		}
		return m
	}
	wait("an interval written after the reload", func() bool { return len(stamps()) > 0 })
	before := stamps()
	// An interval with no sample writes nothing: SIGTERM a few ms after
	// the cut would end an empty one. Half an interval holds ~25 samples
	// of the busy loop at 49 Hz.
	time.Sleep(500 * time.Millisecond)

	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("sprof agent did not exit 20 s after SIGTERM")
	}
	if after := stamps(); len(after) <= len(before) {
		t.Errorf("intervals written: %v before SIGTERM, %v after; want the one under way too", before, after)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.pb.gz"))
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

// deployArgs returns the arguments after `sprof agent` in the systemd
// unit's ExecStart and in the DaemonSet's container args, with the
// variables their runtimes fill in replaced.
func deployArgs(t *testing.T) (unit, daemonSet []string) {
	t.Helper()
	b, err := os.ReadFile("../../deploy/sprof-agent.service")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	for _, line := range strings.Split(text, "\n") {
		if cmd, ok := strings.CutPrefix(line, "ExecStart="); ok {
			unit = strings.Fields(strings.ReplaceAll(cmd, "${STATE_DIRECTORY}", t.TempDir()))
		}
	}
	if len(unit) < 2 || unit[0] != "/usr/local/bin/sprof" || unit[1] != "agent" {
		t.Fatalf("unit ExecStart %q, want /usr/local/bin/sprof agent …", unit)
	}
	b, err = os.ReadFile("../../deploy/sprof-agent-daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	inArgs := false
	for _, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "args:":
			inArgs = true
		case inArgs && strings.HasPrefix(trimmed, "- "):
			daemonSet = append(daemonSet, strings.ReplaceAll(strings.TrimPrefix(trimmed, "- "), "$(NODE_NAME)", "node-1"))
		default:
			inArgs = false
		}
	}
	if len(daemonSet) < 1 || daemonSet[0] != "agent" {
		t.Fatalf("DaemonSet args %q, want agent …", daemonSet)
	}
	return unit[2:], daemonSet[1:]
}

// TestDeployCommandLines: the command lines in deploy/ are ones sprof
// accepts, so the examples cannot drift from the flags.
func TestDeployCommandLines(t *testing.T) {
	unit, ds := deployArgs(t)
	e := &env{strings.NewReader(""), &bytes.Buffer{}, &bytes.Buffer{}}
	for name, args := range map[string][]string{"systemd unit": unit, "DaemonSet": ds} {
		o, err := parseAgent(e, args)
		if err != nil {
			t.Errorf("%s: sprof agent %q: %v", name, args, err)
			continue
		}
		if o.pyroscope == nil {
			t.Errorf("%s: does not push to Pyroscope", name)
		}
	}
}

// TestDeploySystemdUnit checks the unit with systemd's own parser, which
// reports unknown keys and bad values.
func TestDeploySystemdUnit(t *testing.T) {
	analyze := testenv.RequireTool(t, "systemd-analyze")
	b, err := os.ReadFile("../../deploy/sprof-agent.service")
	if err != nil {
		t.Fatal(err)
	}
	// verify wants the binary to exist: stand in for it with this one.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "sprof-agent.service")
	if err := os.WriteFile(path, bytes.ReplaceAll(b, []byte("/usr/local/bin/sprof"), []byte(self)), 0o644); err != nil {
		t.Fatal(err)
	}
	// --man=no: whether the host has the man pages that Documentation=
	// names (perf_event_open(2)) says nothing of the unit.
	out, err := exec.Command(analyze, "verify", "--man=no", path).CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}
