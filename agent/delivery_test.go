package agent

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/profiles/v1development"

	"github.com/sprof/sprof/collector"
	"github.com/sprof/sprof/exporters/otlp"
	"github.com/sprof/sprof/exporters/pyroscope"
	"github.com/sprof/sprof/exporters/pyroscope/pyroscopetest"
	"github.com/sprof/sprof/stacks"
)

// scriptedRecorder hands out the profiles profile makes for each
// interval and remembers when each interval started.
type scriptedRecorder struct {
	profile func(start, end time.Time) *stacks.Profile
	mu      sync.Mutex
	last    time.Time
	starts  []time.Time
}

func (r *scriptedRecorder) Drain() error { return nil }

func (r *scriptedRecorder) Cut() Interval {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	start := r.last
	if start.IsZero() {
		start = now.Add(-time.Second)
	}
	r.last = now
	r.starts = append(r.starts, start)
	p := r.profile(start, now)
	var n uint64
	for _, s := range p.Samples {
		n += uint64(s.Count)
	}
	return &fakeInterval{p, collector.Stats{Samples: n}}
}

func (r *scriptedRecorder) SymbolizerStats() SymbolizerStats { return SymbolizerStats{} }

// intervals returns the starts of the intervals cut so far.
func (r *scriptedRecorder) intervals() []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.starts)
}

// servicesRecorder makes intervals of n services, one process each.
func servicesRecorder(n int) *scriptedRecorder {
	return &scriptedRecorder{profile: func(start, end time.Time) *stacks.Profile {
		exe := &stacks.Mapping{Kind: stacks.User, Start: 0x400000, Limit: 0x500000, File: "/usr/bin/svc"}
		p := &stacks.Profile{Start: start, Duration: end.Sub(start), Period: time.Second / 19, Mappings: []*stacks.Mapping{exe}}
		for i := range n {
			loc := &stacks.Location{Mapping: exe, Address: 0x400000 + uint64(i), Frames: []stacks.Frame{{Function: fmt.Sprintf("serve%d", i)}}}
			p.Samples = append(p.Samples, &stacks.Sample{Stack: []*stacks.Location{loc}, Count: 3,
				Pid: uint32(1000 + i), Tid: uint32(1000 + i), Comm: fmt.Sprintf("svc%03d", i)})
		}
		return p
	}}
}

// running is an agent under test.
type running struct {
	a    *Agent
	log  *syncLog
	stop context.CancelFunc
	done chan error
}

// run starts an agent with cfg, logging to a buffer.
func run(t *testing.T, rec Recorder, cfg Config) *running {
	t.Helper()
	r := &running{log: &syncLog{}, done: make(chan error, 1)}
	cfg.Log = slog.New(slog.NewTextHandler(r.log, nil))
	var err error
	if r.a, err = New(rec, cfg); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	r.stop = stop
	go func() { r.done <- r.a.Run(ctx) }()
	return r
}

// sigterm stops the agent as SIGTERM does and waits for Run to return.
func (r *running) sigterm(t *testing.T) {
	t.Helper()
	r.stop()
	if err := <-r.done; err != nil {
		t.Fatal(err)
	}
}

// syncLog is a log buffer several goroutines may write.
type syncLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// stopLine returns the counts of the last log line of the delivery to to.
func stopLine(t *testing.T, log, to string) (delivered, spilled, dropped string) {
	t.Helper()
	m := regexp.MustCompile(`msg="stopped;[^"]*" to=` + to + ` delivered=(\d+) spilled=(\d+) dropped=(\d+)`).FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("no line on what became of the intervals in the log:\n%s", log)
	}
	return m[1], m[2], m[3]
}

// until waits in the bubble's fake clock until d after t0.
func until(t0 time.Time, d time.Duration) {
	<-time.After(time.Until(t0.Add(d)))
}

// deliveredStarts returns the distinct interval starts the server got, in
// arrival order, and how many profiles each.
func deliveredStarts(srv *pyroscopetest.Server) ([]time.Time, map[time.Time]int) {
	var order []time.Time
	n := map[time.Time]int{}
	for _, p := range srv.Profiles() {
		t0 := time.Unix(0, p.Profile.TimeNanos)
		if n[t0] == 0 {
			order = append(order, t0)
		}
		n[t0]++
	}
	return order, n
}

// TestManyServicesKeepUp: 200 services an interval, against the server's
// flush latency, are each delivered within the interval, so the agent
// never falls behind; one request per series (100 s an interval) could not.
func TestManyServicesKeepUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := pyroscopetest.NewServer()
		cfg := &pyroscope.Config{URL: "http://pyroscope:4040", HTTPClient: srv.Client()}
		r := run(t, servicesRecorder(200), Config{Interval: 5 * time.Second, ProcRoot: t.TempDir(), Pyroscope: cfg})
		t0 := time.Now()
		for i := 1; i <= 6; i++ {
			// Just before the next cut, the last interval is in.
			until(t0, time.Duration(i)*5*time.Second+4*time.Second)
			if order, n := deliveredStarts(srv); len(order) != i || n[order[i-1]] != 200 {
				t.Errorf("%v into the run: %d intervals delivered, want %d of 200 profiles each", time.Since(t0), len(order), i)
				break
			}
		}
		r.sigterm(t)
	})
}

// TestOutageThenStop is the incident: the server is down for 30 s, comes
// back, answers as a server whose storage is not ready yet for 10 s, and
// the agent is stopped right after. Every interval arrives, in order,
// within the flush timeout, over each API, and the log says so.
func TestOutageThenStop(t *testing.T) {
	for _, api := range []pyroscope.API{pyroscope.Push, pyroscope.Ingest} {
		t.Run(string(api), func(t *testing.T) { testOutageThenStop(t, api) })
	}
}

func testOutageThenStop(t *testing.T, api pyroscope.API) {
	synctest.Test(t, func(t *testing.T) {
		srv := pyroscopetest.NewServer()
		rec := servicesRecorder(12)
		cfg := &pyroscope.Config{URL: "http://pyroscope:4040", API: api, HTTPClient: srv.Client()}
		r := run(t, rec, Config{Interval: 5 * time.Second, ProcRoot: t.TempDir(), Pyroscope: cfg})
		t0 := time.Now()
		until(t0, 12*time.Second)
		srv.SetDown(true)
		until(t0, 42*time.Second)
		srv.SetStarting(true)
		srv.SetDown(false)
		until(t0, 52*time.Second)
		srv.SetStarting(false)
		until(t0, 53*time.Second)
		r.sigterm(t)
		if took := time.Since(t0) - 53*time.Second; took > DefaultFlushTimeout {
			t.Errorf("the flush took %v, more than the flush timeout", took)
		}
		cut := rec.intervals()
		order, n := deliveredStarts(srv)
		if len(order) != len(cut) {
			t.Errorf("%d of %d intervals delivered", len(order), len(cut))
		}
		for i, t0 := range order {
			if !t0.Equal(cut[i].Truncate(0)) || n[t0] != 12 {
				t.Errorf("delivery %d: interval of %v with %d profiles; want %v with 12", i, t0, n[t0], cut[i])
			}
		}
		if d, s, x := stopLine(t, r.log.String(), "pyroscope"); d != fmt.Sprint(len(cut)) || s != "0" || x != "0" {
			t.Errorf("log says delivered=%s spilled=%s dropped=%s, want %d, 0, 0", d, s, x, len(cut))
		}
	})
}

// TestStopSpills: what cannot be sent by the end of the flush timeout is
// written to the output directory, and the log says how many intervals
// went where.
func TestStopSpills(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := pyroscopetest.NewServer()
		out := t.TempDir()
		cfg := &pyroscope.Config{URL: "http://pyroscope:4040", HTTPClient: srv.Client()}
		r := run(t, servicesRecorder(3), Config{Interval: 5 * time.Second, ProcRoot: t.TempDir(), Pyroscope: cfg, OutputDir: out,
			FlushTimeout: 2 * time.Second})
		t0 := time.Now()
		until(t0, 7*time.Second)
		srv.SetDown(true)
		until(t0, 23*time.Second)
		r.sigterm(t)
		// Intervals cut at 5 s (delivered), 10, 15, 20 and 23 s (at stop).
		if d, s, x := stopLine(t, r.log.String(), "pyroscope"); d != "1" || s != "4" || x != "0" {
			t.Errorf("log says delivered=%s spilled=%s dropped=%s, want 1, 4, 0", d, s, x)
		}
		files, err := filepath.Glob(filepath.Join(out, "unsent-pyroscope", "*"+fileSuffix))
		if err != nil || len(files) != 4*3 {
			t.Errorf("%d files written out (%v), want 4 intervals of 3", len(files), err)
		}
		for _, f := range files {
			if p := readPprof(t, f); total(p) != 3 {
				t.Errorf("%s: %d samples, want 3", f, total(p))
			}
		}
	})
}

// TestOTLPDelivery: with an OTLP endpoint the interval goes there too, in
// one export per service, of one resource; with off-CPU time, each
// resource has an off_cpu/nanoseconds profile beside its CPU profile.
func TestOTLPDelivery(t *testing.T) {
	for _, offCPU := range []bool{false, true} {
		t.Run(fmt.Sprintf("off-CPU=%v", offCPU), func(t *testing.T) { testOTLPDelivery(t, offCPU) })
	}
}

func testOTLPDelivery(t *testing.T, offCPU bool) {
	var mu sync.Mutex
	var got []*collectorpb.ExportProfilesServiceRequest
	srv := httptest.NewServer(otlpReceiver(&mu, func(req *collectorpb.ExportProfilesServiceRequest) { got = append(got, req) }))
	defer srv.Close()
	pyro := pyroscopetest.NewServer()
	pyro.FlushEvery = 0
	a, err := New(&fakeRecorder{offCPU: offCPU}, Config{Interval: time.Hour, ProcRoot: fakeProc(t), Host: "node-1",
		Pyroscope: pyroscopeConfig(pyro.Start(t)), OTLP: &otlp.Config{Endpoint: srv.URL, Protocol: otlp.HTTP}})
	if err != nil {
		t.Fatal(err)
	}
	start(t, a)()
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || len(pyro.Profiles()) != 2 {
		t.Fatalf("%d OTLP exports and %d Pyroscope profiles, want 2 and 2", len(got), len(pyro.Profiles()))
	}
	services, waits := map[string]int64{}, map[string]time.Duration{}
	for _, export := range got {
		if len(export.ResourceProfiles) != 1 {
			t.Errorf("an export of %d resources, want 1", len(export.ResourceProfiles))
		}
	}
	for _, export := range got {
		strs := export.Dictionary.StringTable
		for _, rp := range export.ResourceProfiles {
			var name, host string
			for _, kv := range rp.Resource.Attributes {
				switch kv.Key {
				case "service.name":
					name = kv.Value.GetStringValue()
				case "host.name":
					host = kv.Value.GetStringValue()
				}
			}
			if host != "node-1" {
				t.Errorf("host.name %q", host)
			}
			for _, p := range rp.ScopeProfiles[0].Profiles {
				switch typ := strs[p.SampleType.TypeStrindex] + "/" + strs[p.SampleType.UnitStrindex]; typ {
				case "samples/count":
					for _, s := range p.Samples {
						services[name] += s.Values[0]
					}
				case "off_cpu/nanoseconds":
					for _, s := range p.Samples {
						waits[name] += time.Duration(s.Values[0])
					}
				default:
					t.Errorf("%s: a profile of %s", name, typ)
				}
			}
		}
	}
	if services["web"] != webCount || services["db"] != dbCount {
		t.Errorf("samples per service %v, want web %d, db %d", services, webCount, dbCount)
	}
	want := map[string]time.Duration{}
	if offCPU {
		want = map[string]time.Duration{"web": webWait, "db": dbWait}
	}
	if !maps.Equal(waits, want) {
		t.Errorf("off-CPU time per service %v, want %v", waits, want)
	}
}

// TestIngestionLimitsReachDestinations: the tenant's limits given to the
// agent pace both destinations: no profile sent to Pyroscope costs more
// than the burst (a large one is split to fit), and the OTLP exports are
// held to the same budget.
func TestIngestionLimitsReachDestinations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := pyroscopetest.NewServer()
		srv.IngestionRate = 0
		const burst = 128 << 10
		rec := &scriptedRecorder{profile: func(start, end time.Time) *stacks.Profile {
			p := pyroscopetest.WideProfile(600, 20) // about 640 KB of pprof
			p.Start, p.Duration = start, end.Sub(start)
			return p
		}}
		cfg := &pyroscope.Config{URL: "http://pyroscope:4040", HTTPClient: srv.Client()}
		r := run(t, rec, Config{Interval: 5 * time.Second, ProcRoot: t.TempDir(), Pyroscope: cfg,
			OTLP:          &otlp.Config{Endpoint: "http://otlp:4040", Protocol: otlp.HTTP, HTTPClient: &http.Client{Transport: handlerTransport{http.NotFoundHandler()}}},
			IngestionRate: 1 << 20, IngestionBurst: burst})
		until(time.Now(), 6*time.Second)
		r.sigterm(t)
		got := srv.Profiles()
		if len(got) < 5 {
			t.Errorf("%d profiles, want the interval split into 5 or more to fit a %d-byte burst", len(got), burst)
		}
		for _, fp := range got {
			var buf bytes.Buffer
			fp.Profile.WriteUncompressed(&buf)
			if buf.Len() > burst {
				t.Errorf("a profile of %d bytes, over the %d-byte burst", buf.Len(), burst)
			}
		}
		if b := r.a.deliveries[1].sender.(*otlpSender).pace.Budget(); b > burst {
			t.Errorf("OTLP exports may cost %d bytes, over the %d-byte burst", b, burst)
		}
	})
}
