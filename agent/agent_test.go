package agent

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/pprof/profile"
	pushv1 "github.com/grafana/pyroscope/api/gen/proto/go/push/v1"
	"github.com/grafana/pyroscope/api/gen/proto/go/push/v1/pushv1connect"

	"github.com/sprof/sprof/collector"
	"github.com/sprof/sprof/exporters"
	"github.com/sprof/sprof/exporters/pyroscope"
	"github.com/sprof/sprof/exporters/pyroscope/pyroscopetest"
	"github.com/sprof/sprof/stacks"
	"github.com/sprof/sprof/symbolize"
)

// fakeRecorder hands out one made-up interval per Cut: process 10 "web"
// (main thread 3 samples, a worker thread named "worker" 2) and process 20
// "db", sampled only in a thread named "db-io" (4 samples).
type fakeRecorder struct {
	mu     sync.Mutex
	last   time.Time
	cuts   int
	drains int
	// offCPU adds off-CPU time to the intervals: webWait and dbWait, db's
	// partly on a stack with no CPU sample.
	offCPU bool
}

const webCount, dbCount = 5, 4

const webWait, dbWait = 30 * time.Millisecond, 2 * time.Second

func (f *fakeRecorder) Drain() error {
	f.mu.Lock()
	f.drains++
	f.mu.Unlock()
	return nil
}

// fakeInterval is an interval of fakeRecorder, named already.
type fakeInterval struct {
	p  *stacks.Profile
	st collector.Stats
}

func (iv *fakeInterval) Resolve(context.Context) *stacks.Profile { return iv.p }
func (iv *fakeInterval) Stats() collector.Stats                  { return iv.st }

func (f *fakeRecorder) Cut() Interval {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	start := f.last
	if start.IsZero() {
		start = now.Add(-time.Millisecond)
	}
	f.last = now
	f.cuts++
	exe := &stacks.Mapping{Kind: stacks.User, Start: 0x400000, Limit: 0x500000, File: "/usr/bin/app", BuildID: "abcd"}
	loc := func(fn string, off uint64) *stacks.Location {
		return &stacks.Location{Mapping: exe, Address: 0x400000 + off, Frames: []stacks.Frame{{Function: fn}}}
	}
	main := loc("main", 0x10)
	p := &stacks.Profile{Start: start, Duration: now.Sub(start), Period: time.Second / 19, Mappings: []*stacks.Mapping{exe}, Lost: 1,
		Samples: []*stacks.Sample{
			{Stack: []*stacks.Location{loc("serve", 0x20), main}, Count: 3, Pid: 10, Tid: 10, Comm: "web"},
			{Stack: []*stacks.Location{loc("work", 0x30), main}, Count: 2, Pid: 10, Tid: 11, Comm: "worker"},
			{Stack: []*stacks.Location{loc("query", 0x40), main}, Count: dbCount, Pid: 20, Tid: 21, Comm: "db-io"},
		}}
	if f.offCPU {
		p.OffCPU = true
		p.Samples[1].OffCPU = webWait
		p.Samples[2].OffCPU = dbWait / 4
		p.Samples = append(p.Samples, &stacks.Sample{Stack: []*stacks.Location{loc("read", 0x50), main}, OffCPU: dbWait * 3 / 4, Pid: 20, Tid: 21, Comm: "db-io"})
	}
	return &fakeInterval{p, collector.Stats{Samples: webCount + dbCount, Lost: uint64(f.cuts), Busy: time.Millisecond}}
}

func (f *fakeRecorder) SymbolizerStats() SymbolizerStats {
	return SymbolizerStats{Cache: &symbolize.CacheStats{Hits: 7, Misses: 2, Bytes: 1 << 20}, GSYM: &symbolize.GSYMStats{Converted: 3, Reused: 5}}
}

// fakeProc is a /proc with the command name of process 20.
func fakeProc(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "20"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "20", "comm"), []byte("db\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// push is one profile a fake server received.
type push struct {
	labels  string
	auth    string
	profile *profile.Profile
}

// fakePyroscope is a Pyroscope stand-in made of the api module's own
// Push handler on 127.0.0.1. It can be stopped and started again on the
// same port, like a server that goes down and comes back.
type fakePyroscope struct {
	t        *testing.T
	mu       sync.Mutex
	pushes   []push
	bodySize atomic.Uint64
	addr     string
	srv      *http.Server
}

func newFakePyroscope(t *testing.T) *fakePyroscope {
	f := &fakePyroscope{t: t, addr: "127.0.0.1:0"}
	f.start()
	t.Cleanup(f.stop)
	return f
}

func (f *fakePyroscope) url() string { return "http://" + f.addr }

func (f *fakePyroscope) start() {
	l, err := net.Listen("tcp", f.addr)
	if err != nil {
		f.t.Fatal(err)
	}
	f.addr = l.Addr().String()
	mux := http.NewServeMux()
	path, h := pushv1connect.NewPusherServiceHandler(f)
	mux.Handle(path, h)
	f.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = &countingBody{r.Body, &f.bodySize}
		mux.ServeHTTP(w, r)
	})}
	go f.srv.Serve(l)
}

func (f *fakePyroscope) stop() { f.srv.Close() }

func (f *fakePyroscope) Push(_ context.Context, req *connect.Request[pushv1.PushRequest]) (*connect.Response[pushv1.PushResponse], error) {
	for _, s := range req.Msg.Series {
		var labels []string
		for _, l := range s.Labels {
			labels = append(labels, l.Name+"="+l.Value)
		}
		for _, raw := range s.Samples {
			p, err := profile.ParseData(raw.RawProfile)
			if err == nil {
				err = exporters.CheckPprof(p)
			}
			if err != nil {
				return nil, connect.NewError(connect.CodeInvalidArgument, err)
			}
			f.mu.Lock()
			f.pushes = append(f.pushes, push{strings.Join(labels, ","), req.Header().Get("Authorization"), p})
			f.mu.Unlock()
		}
	}
	return connect.NewResponse(&pushv1.PushResponse{}), nil
}

func (f *fakePyroscope) received() []push {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.pushes)
}

// waitFor polls cond until it holds or the time runs out.
func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: still waiting for %s", limit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// start runs a in the background; the returned function stops it and
// waits for Run to return.
func start(t *testing.T, a *Agent) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			// Run's exit is bounded by FlushTimeout and the time to cut
			// and write the last interval, which a loaded host stretches
			// past any bound a test could set here; a Run that never
			// returns is go test's -timeout, with every goroutine's stack.
			err = <-done
		})
		return err
	}
	t.Cleanup(func() { stop() })
	return stop
}

func pyroscopeConfig(url string) *pyroscope.Config {
	return &pyroscope.Config{URL: url, Host: "node-1", Labels: map[string]string{"env": "prod"},
		Attempts: 1, Timeout: 2 * time.Second}
}

func total(p *profile.Profile) int64 {
	var n int64
	for _, s := range p.Sample {
		n += s.Value[0]
	}
	return n
}

// TestThreeIntervals: every interval reaches Pyroscope as one decodable
// profile per service, labelled with the service (the main thread's
// command name, also when only another thread was sampled), the host and
// the configured labels, and authenticated with the credentials.
func TestThreeIntervals(t *testing.T) {
	srv := newFakePyroscope(t)
	rec := &fakeRecorder{}
	a, err := New(rec, Config{Interval: 200 * time.Millisecond, DrainEvery: 50 * time.Millisecond, ProcRoot: fakeProc(t),
		Pyroscope:   pyroscopeConfig(srv.url()),
		Credentials: func() (Credentials, error) { return Credentials{Token: "tok"}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, a)
	waitFor(t, "three intervals", 5*time.Second, func() bool { return len(srv.received()) >= 6 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	got := srv.received()
	want := map[string]int64{
		"__name__=process_cpu,env=prod,host=node-1,service_name=db":  dbCount,
		"__name__=process_cpu,env=prod,host=node-1,service_name=web": webCount,
	}
	lastTime := map[string]int64{}
	for i, p := range got {
		n, ok := want[p.labels]
		if !ok {
			t.Fatalf("push %d: labels %s; want one of %v", i, p.labels, want)
		}
		if c := total(p.profile); c != n {
			t.Errorf("push %d (%s): %d samples, want %d", i, p.labels, c, n)
		}
		if p.auth != "Bearer tok" {
			t.Errorf("push %d: Authorization %q", i, p.auth)
		}
		if p.profile.TimeNanos <= lastTime[p.labels] {
			t.Errorf("push %d (%s): time %d not after the previous interval's %d", i, p.labels, p.profile.TimeNanos, lastTime[p.labels])
		}
		lastTime[p.labels] = p.profile.TimeNanos
	}
	if len(got)%2 != 0 {
		t.Errorf("%d pushes, want two per interval", len(got))
	}
	m, d := &a.metrics, a.deliveries[0]
	if ok := d.sentOK.Load(); ok != uint64(len(got)) || d.sentFailed.Load() != 0 {
		t.Errorf("metrics: %d pushes ok, %d failed; the server received %d", ok, d.sentFailed.Load(), len(got))
	}
	if sent, body := d.sender.sentBytes(), srv.bodySize.Load(); sent == 0 || sent != body {
		t.Errorf("metrics: %d bytes sent, the server read %d", sent, body)
	}
	if n := m.intervals.Load(); n != uint64(rec.cuts) || m.samples.Load() != n*(webCount+dbCount) || m.lost.Load() != n {
		t.Errorf("metrics: %d intervals, %d samples, %d lost after %d cuts", n, m.samples.Load(), m.lost.Load(), rec.cuts)
	}
}

// TestServerDown: while the server is unreachable, at most Queue intervals
// wait and the older ones are dropped and counted; when it is back, the
// queued intervals and the new ones arrive. The 20 s outage at
// 15 s intervals is scaled down to 2 s at 200 ms (ten intervals, for a
// queue of three).
func TestServerDown(t *testing.T) {
	const queue = 3
	srv := newFakePyroscope(t)
	rec := &fakeRecorder{}
	a, err := New(rec, Config{Interval: 200 * time.Millisecond, DrainEvery: 50 * time.Millisecond, ProcRoot: fakeProc(t),
		Pyroscope: pyroscopeConfig(srv.url()), Queue: queue, RetryBackoff: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, a)
	waitFor(t, "the first intervals", 5*time.Second, func() bool { return len(srv.received()) >= 4 })

	srv.stop()
	down := time.Now()
	maxQueued := int64(0)
	for time.Since(down) < 2*time.Second {
		maxQueued = max(maxQueued, int64(a.deliveries[0].queue.len()))
		time.Sleep(5 * time.Millisecond)
	}
	before := len(srv.received())
	srv.start()
	up := time.Now()

	// The backlog goes first: profiles of intervals that ended while the
	// server was down arrive, and then new ones.
	waitFor(t, "pushes to resume", 5*time.Second, func() bool {
		got := srv.received()
		return len(got) >= before+2*(queue+2) && time.Unix(0, got[len(got)-1].profile.TimeNanos).After(up)
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	got := srv.received()
	var backlog int
	for _, p := range got[before:] {
		if t0 := time.Unix(0, p.profile.TimeNanos); t0.After(down) && t0.Before(up) {
			backlog++
		}
	}
	m, d := &a.metrics, a.deliveries[0]
	dropped := d.droppedBy[dropQueueFull].Load()
	t.Logf("%d intervals, %d pushed (%d from the outage), %d failed, %d dropped, at most %d queued",
		m.intervals.Load(), d.sentOK.Load(), backlog, d.sentFailed.Load(), dropped, maxQueued)
	if maxQueued > queue {
		t.Errorf("%d intervals queued, the limit is %d", maxQueued, queue)
	}
	// The queue is full of the outage's intervals when the server comes
	// back; newer ones may push some out before the first retry.
	if backlog < 2 {
		t.Errorf("%d profiles from the outage delivered after it, want at least one interval's", backlog)
	}
	if dropped == 0 || d.sentFailed.Load() == 0 {
		t.Errorf("a 2 s outage with room for %d intervals dropped %d profiles with %d failed pushes", queue, dropped, d.sentFailed.Load())
	}
	// Every profile is accounted for: delivered, or dropped. A push the
	// server took just as it went down may have failed on the way back
	// and been sent again: delivery is at least once.
	var allDropped uint64
	for r := range numDropReasons {
		allDropped += d.droppedBy[r].Load()
	}
	ok, failed := d.sentOK.Load(), d.sentFailed.Load()
	if made := 2 * m.intervals.Load(); ok+allDropped != made || uint64(len(got)) < ok || uint64(len(got)) > ok+failed {
		t.Errorf("%d profiles made, %d pushed + %d dropped, %d failed; the server received %d", made, ok, allDropped, failed, len(got))
	}
}

// TestFlushOnStop: stopping (SIGTERM in sprof) sends the interval under
// way at once instead of losing it, and gives up after FlushTimeout when
// the server does not answer.
func TestFlushOnStop(t *testing.T) {
	srv := newFakePyroscope(t)
	out := t.TempDir()
	a, err := New(&fakeRecorder{}, Config{Interval: time.Hour, DrainEvery: 10 * time.Millisecond, ProcRoot: fakeProc(t),
		Pyroscope: pyroscopeConfig(srv.url()), OutputDir: out})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, a)
	time.Sleep(50 * time.Millisecond)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := len(srv.received()); n != 2 {
		t.Errorf("%d profiles pushed at stop, want the interval's 2", n)
	}
	if files, _ := filepath.Glob(filepath.Join(out, "*"+fileSuffix)); len(files) != 2 {
		t.Errorf("files at stop: %q; want 2", files)
	}

	srv.stop()
	a, err = New(&fakeRecorder{}, Config{Interval: time.Hour, ProcRoot: fakeProc(t),
		Pyroscope: pyroscopeConfig(srv.url()), RetryBackoff: 10 * time.Millisecond, FlushTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stop = start(t, a)
	began := time.Now()
	stop()
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("stopping with the server down took %v, FlushTimeout is 300ms", took)
	}
	if n := a.deliveries[0].droppedBy[dropShutdown].Load(); n != 2 {
		t.Errorf("%d profiles dropped at shutdown, want 2 (all drops %v)", n, &a.deliveries[0].droppedBy)
	}
}

// TestRejectedDropped: a profile the server refuses for good is dropped at
// once and counted, not retried forever.
func TestRejectedDropped(t *testing.T) {
	srv := http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"code":"invalid_argument","message":"no"}`)
	})}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	defer srv.Close()
	a, err := New(&fakeRecorder{}, Config{Interval: time.Hour, ProcRoot: fakeProc(t), Pyroscope: pyroscopeConfig("http://" + l.Addr().String())})
	if err != nil {
		t.Fatal(err)
	}
	start(t, a)()
	if n := a.deliveries[0].droppedBy[dropRejected].Load(); n != 2 || a.deliveries[0].sentFailed.Load() != 2 {
		t.Errorf("%d rejected profiles dropped, %d failed pushes; want 2 and 2", n, a.deliveries[0].sentFailed.Load())
	}
}

func TestNewChecksConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"nowhere", Config{}, "must go somewhere"},
		{"bad URL", Config{Pyroscope: &pyroscope.Config{URL: "pyroscope:4040"}}, "want http:// or https://"},
		{"bad label", Config{Pyroscope: &pyroscope.Config{URL: "http://p", Labels: map[string]string{"__x": "1"}}}, `label "__x"`},
		{"bad credentials", Config{Pyroscope: &pyroscope.Config{URL: "http://p"},
			Credentials: func() (Credentials, error) { return Credentials{}, fmt.Errorf("no file") }}, "no file"},
	} {
		if _, err := New(&fakeRecorder{}, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one with %q", tc.name, err, tc.want)
		}
	}
}

// TestIngestAPI: with the legacy /ingest API, each service's profile
// arrives as a multipart pprof under the name `service{labels}`.
func TestIngestAPI(t *testing.T) {
	srv := pyroscopetest.NewServer()
	srv.FlushEvery = 0
	cfg := pyroscopeConfig(srv.Start(t))
	cfg.API = pyroscope.Ingest
	a, err := New(&fakeRecorder{}, Config{Interval: time.Hour, ProcRoot: fakeProc(t), Pyroscope: cfg})
	if err != nil {
		t.Fatal(err)
	}
	start(t, a)()
	names := map[string]int64{}
	for _, p := range srv.Profiles() {
		names[p.Query["name"]] += total(p.Profile)
	}
	want := map[string]int64{"db{env=prod,host=node-1}": dbCount, "web{env=prod,host=node-1}": webCount}
	if fmt.Sprint(names) != fmt.Sprint(want) || a.deliveries[0].sentOK.Load() != 2 {
		t.Errorf("ingested %v (%d pushes), want %v", names, a.deliveries[0].sentOK.Load(), want)
	}
}

// TestHangingServer: a server that accepts a push and never answers costs
// one request timeout, not the agent's pushes for good.
func TestHangingServer(t *testing.T) {
	release := make(chan struct{})
	srv := http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release })}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	defer srv.Close()
	defer close(release)
	cfg := pyroscopeConfig("http://" + l.Addr().String())
	cfg.Timeout = 100 * time.Millisecond
	a, err := New(&fakeRecorder{}, Config{Interval: 50 * time.Millisecond, DrainEvery: 10 * time.Millisecond, ProcRoot: fakeProc(t),
		Pyroscope: cfg, RetryBackoff: 10 * time.Millisecond, FlushTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, a)
	waitFor(t, "timed-out pushes", 5*time.Second, func() bool { return a.deliveries[0].sentFailed.Load() >= 3 })
	stop()
}

func TestDefaultPushTimeout(t *testing.T) {
	cfg := pushConfig(pyroscope.Config{URL: "http://p"}, &atomic.Uint64{})
	if got := cfg.HTTPClient.Timeout; got != defaultPushTimeout {
		t.Errorf("requests time out after %v, want %v", got, defaultPushTimeout)
	}
}
