package agent

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/pprof/profile"
	querierv1 "github.com/grafana/pyroscope/api/gen/proto/go/querier/v1"
	"github.com/grafana/pyroscope/api/gen/proto/go/querier/v1/querierv1connect"
	typesv1 "github.com/grafana/pyroscope/api/gen/proto/go/types/v1"

	"github.com/sprof/sprof/exporters/otlp"
	"github.com/sprof/sprof/exporters/pyroscope"
	"github.com/sprof/sprof/exporters/pyroscope/pyroscopetest"
	"github.com/sprof/sprof/stacks"
)

// The real-server test runs sprof's delivery against a Grafana Pyroscope
// server — the oracle for what the server takes and what it makes of it —
// and reads the profiles back through Pyroscope's own query API. The
// server cannot be built in CI (its sources are not reachable there), so
// the test runs only when SPROF_PYROSCOPE_BIN names a server binary;
// scripts/pyroscope-server.sh says how it is run.
//
// Knobs: SPROF_E2E_DURATION (default 2m) is how long the agents run,
// SPROF_E2E_OUTAGE (default 30s) how long the server is down in the
// middle of it.

// e2eRecorder makes, every interval, service web-TAG (3 samples of
// serve, 1 of gc: 75/25) and service db-TAG in a container (2 samples of
// query).
func e2eRecorder(tag string) *scriptedRecorder {
	return &scriptedRecorder{profile: func(start, end time.Time) *stacks.Profile {
		exe := &stacks.Mapping{Kind: stacks.User, Start: 0x400000, Limit: 0x500000, File: "/usr/bin/e2e", BuildID: "0123456789abcdef"}
		loc := func(fn string, off uint64, line int) *stacks.Location {
			return &stacks.Location{Mapping: exe, Address: 0x400000 + off, Frames: []stacks.Frame{{Function: fn, File: "e2e.c", Line: line}}}
		}
		main := loc("main", 0x10, 1)
		return &stacks.Profile{Start: start, Duration: end.Sub(start), Period: time.Second / 99, Mappings: []*stacks.Mapping{exe},
			Samples: []*stacks.Sample{
				{Stack: []*stacks.Location{loc("serve", 0x20, 2), main}, Count: 3, Pid: 100, Tid: 100, Comm: "web-" + tag},
				{Stack: []*stacks.Location{loc("gc", 0x30, 3), main}, Count: 1, Pid: 100, Tid: 101, Comm: "web-" + tag},
				{Stack: []*stacks.Location{loc("query", 0x40, 4), main}, Count: 2, Pid: 200, Tid: 200, Comm: "db-" + tag, Container: e2eContainer},
			}}
	}}
}

const e2eContainer = "4f797c539e6c745de61a93ca3ff892358ecbcaccd8414d5db545c38428142970"

// realPyroscope is a Pyroscope server process run by
// scripts/pyroscope-server.sh.
type realPyroscope struct {
	t                            *testing.T
	bin, dir                     string
	http, grpc, memberlist, raft int
	cmd                          *exec.Cmd
	exited                       chan struct{}
	log                          *os.File
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func (s *realPyroscope) url() string { return "http://127.0.0.1:" + strconv.Itoa(s.http) }

// start runs the server and waits until it says it is ready.
func (s *realPyroscope) start() {
	s.t.Helper()
	script, err := filepath.Abs("../scripts/pyroscope-server.sh")
	if err != nil {
		s.t.Fatal(err)
	}
	s.cmd = exec.Command(script, s.bin, s.dir, strconv.Itoa(s.http), strconv.Itoa(s.grpc), strconv.Itoa(s.memberlist), strconv.Itoa(s.raft))
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.exited = make(chan struct{})
	go func() { s.cmd.Wait(); close(s.exited) }()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := http.Get(s.url() + "/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-s.exited:
			s.t.Fatalf("the Pyroscope server exited before it was ready; its log is %s", s.log.Name())
		case <-time.After(200 * time.Millisecond): // polling a process we do not control
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("the Pyroscope server was not ready after 2 minutes; its log is %s", s.log.Name())
		}
	}
}

// stop ends the server as an operator would, with SIGTERM.
func (s *realPyroscope) stop() {
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(time.Minute):
		s.cmd.Process.Kill()
		<-s.exited
	}
}

// e2eAgent is one agent of the test and where it sends.
type e2eAgent struct {
	tag string
	rec *scriptedRecorder
	r   *running
	out string
}

func TestRealPyroscope(t *testing.T) {
	bin := os.Getenv("SPROF_PYROSCOPE_BIN")
	if bin == "" {
		t.Skip("SPROF_PYROSCOPE_BIN is not set: no Pyroscope server to test against (see scripts/pyroscope-server.sh)")
	}
	duration, outage := 2*time.Minute, 30*time.Second
	for _, v := range []struct {
		name string
		d    *time.Duration
	}{{"SPROF_E2E_DURATION", &duration}, {"SPROF_E2E_OUTAGE", &outage}} {
		if s := os.Getenv(v.name); s != "" {
			d, err := time.ParseDuration(s)
			if err != nil {
				t.Fatalf("%s: %v", v.name, err)
			}
			*v.d = d
		}
	}
	dir := t.TempDir()
	logFile, err := os.Create(filepath.Join(dir, "pyroscope.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	srv := &realPyroscope{t: t, bin: bin, dir: filepath.Join(dir, "server"), http: freePort(t), grpc: freePort(t),
		memberlist: freePort(t), raft: freePort(t), log: logFile}
	began := time.Now()
	srv.start()
	t.Logf("Pyroscope ready in %v at %s", time.Since(began).Round(time.Millisecond), srv.url())
	defer srv.stop()

	const interval = 5 * time.Second
	// 200 services are judged against the agent's default interval; the
	// agents below cut every 5 s to fit more intervals into the run.
	t.Run("200 services", func(t *testing.T) { manyServices(t, srv.url(), DefaultInterval) })

	var agents []*e2eAgent
	for _, tag := range []string{"push", "ingest", "otlpgrpc", "otlphttp"} {
		ea := &e2eAgent{tag: tag, rec: e2eRecorder(tag), out: filepath.Join(dir, "out-"+tag)}
		cfg := Config{Interval: interval, ProcRoot: t.TempDir(), OutputDir: ea.out, Host: "node-e2e", FlushTimeout: 30 * time.Second}
		switch tag {
		case "push", "ingest":
			cfg.Pyroscope = &pyroscope.Config{URL: srv.url(), API: pyroscope.API(tag), Host: "node-e2e", Labels: map[string]string{"env": "e2e"}}
		case "otlpgrpc":
			cfg.OTLP = &otlp.Config{Endpoint: srv.url(), Protocol: otlp.GRPC}
		case "otlphttp":
			cfg.OTLP = &otlp.Config{Endpoint: srv.url(), Protocol: otlp.HTTP}
		}
		ea.r = run(t, ea.rec, cfg)
		agents = append(agents, ea)
	}
	t0 := time.Now()
	downAt := max((duration-outage)/2, 0)
	<-time.After(time.Until(t0.Add(downAt)))
	if outage > 0 {
		// A request the server took but could not answer before it
		// stopped is sent again: delivery is at least once. The outage
		// starts between requests, so that the totals can be exact.
		settled := func() bool {
			for _, ea := range agents {
				d := ea.r.a.deliveries[0]
				if d.queue.len() > 0 || d.delivered.Load() != uint64(len(ea.rec.intervals())) {
					return false
				}
			}
			return true
		}
		for !settled() {
			<-time.After(50 * time.Millisecond) // polling agents under way
		}
		t.Logf("stopping the server %v into the run for %v", time.Since(t0).Round(time.Millisecond), outage)
		srv.stop()
		<-time.After(outage)
		began := time.Now()
		srv.start()
		t.Logf("server back after %v, ready in %v", time.Since(t0.Add(downAt)).Round(time.Second), time.Since(began).Round(time.Millisecond))
	}
	<-time.After(time.Until(t0.Add(duration)))
	stopAt := time.Now()
	for _, ea := range agents {
		ea.r.stop() // SIGTERM, to all at once
	}
	for _, ea := range agents {
		ea.r.sigterm(t)
	}
	t.Logf("agents stopped in %v after SIGTERM", time.Since(stopAt).Round(time.Millisecond))

	q := querierClient(srv.url())
	for _, ea := range agents {
		t.Run(ea.tag, func(t *testing.T) {
			cuts := len(ea.rec.intervals())
			to := "pyroscope"
			if strings.HasPrefix(ea.tag, "otlp") {
				to = "otlp"
			}
			d, s, x := stopLine(t, ea.r.log.String(), to)
			t.Logf("%d intervals cut; the agent says delivered=%s spilled=%s dropped=%s", cuts, d, s, x)
			for _, line := range logTrouble(ea.r.log.String()) {
				t.Logf("agent log: %s", line)
			}
			if d != strconv.Itoa(cuts) || s != "0" || x != "0" {
				t.Errorf("the agent delivered %s of %d intervals (spilled %s, dropped %s)\n%s", d, cuts, s, x, ea.r.log.String())
			}
			period := int64(time.Second / 99)
			for _, svc := range []struct {
				name   string
				total  int64
				shares map[string]float64
			}{
				{"web-" + ea.tag, 4, map[string]float64{"serve": 0.75, "gc": 0.25}},
				{"db-" + ea.tag, 2, map[string]float64{"query": 1}},
			} {
				want := int64(cuts) * svc.total * period
				p := waitForTotal(t, q, svc.name, t0.Add(-time.Minute), time.Now().Add(time.Minute), want)
				got := leafShares(p)
				files := filesShares(t, ea.out, svc.name)
				t.Logf("%s: total %d ns = %d samples of 1/99 s (want %d); leaf shares from the server %v, from --output-dir %v",
					svc.name, totalValue(p), totalValue(p)/period, want/period, got, files)
				for fn, share := range svc.shares {
					if math.Abs(got[fn]-share) > 0.02 || math.Abs(got[fn]-files[fn]) > 0.02 {
						t.Errorf("%s: %s has %.1f%% on the server, %.1f%% in the files, want %.0f%%", svc.name, fn, 100*got[fn], 100*files[fn], 100*share)
					}
				}
				for _, s := range p.Sample {
					if s.Value[0]%period != 0 {
						t.Errorf("%s: value %d is not a multiple of the period %d", svc.name, s.Value[0], period)
					}
				}
				labels := seriesLabels(t, q, svc.name, t0.Add(-time.Minute), time.Now().Add(time.Minute))
				t.Logf("%s: series labels %v", svc.name, labels)
				checkLabels(t, ea.tag, svc.name, labels)
			}
		})
	}
}

// logTrouble sums up an agent's warnings and errors: each message, how
// often, and the error of its first occurrence, shortened.
func logTrouble(log string) []string {
	var out []string
	count := map[string]int{}
	line := regexp.MustCompile(`level=(?:WARN|ERROR) msg="([^"]*)".*? err="((?:[^"\\]|\\.)*)"`)
	for _, m := range line.FindAllStringSubmatch(log, -1) {
		if count[m[1]]++; count[m[1]] == 1 {
			out = append(out, m[1]+": "+m[2][:min(len(m[2]), 200)])
		}
	}
	for i, l := range out {
		msg, _, _ := strings.Cut(l, ": ")
		out[i] = fmt.Sprintf("%d× %s", count[msg], l)
	}
	return out
}

// manyServices sends one interval of 200 services, 30 distinct stacks of
// 20 frames each (about 7 MB of pprof, over the server's rate limit
// burst), over each API as the agent sends it (paced, a request per
// profile, many at a time), wants each delivered within an interval, and
// reads each service's total back. One request per series, one after
// another, as sprof used to push, is timed on the first ten series for
// comparison.
func manyServices(t *testing.T, url string, interval time.Duration) {
	q := querierClient(url)
	from := time.Now()
	// The three APIs charge one tenant's rate limit.
	pace := pyroscope.NewPacer(pyroscope.Limits{})
	c, err := pyroscope.New(pyroscope.Config{URL: url, Host: "node-e2e", Pacer: pace})
	if err != nil {
		t.Fatal(err)
	}
	single := pyroscopetest.ServicesProfile(10, 30, 20)
	for _, s := range single.Samples {
		s.Comm = "single-" + s.Comm
	}
	began := time.Now()
	for _, s := range pyroscope.Split(single, pyroscope.Services("", single.Samples, "")) {
		if err := c.Send(context.Background(), []pyroscope.Series{s})[0]; err != nil {
			t.Fatalf("one by one: %v", err)
		}
	}
	t.Logf("10 services, one Push request each, one after another: %v", time.Since(began).Round(time.Millisecond))
	for _, api := range []string{"push", "ingest", "otlp"} {
		p := pyroscopetest.ServicesProfile(200, 30, 20)
		p.Start = time.Now()
		for _, s := range p.Samples {
			s.Comm = api + "-" + s.Comm
		}
		series := pyroscope.Split(p, pyroscope.Services("", p.Samples, ""))
		var send func() []error
		switch api {
		case "push", "ingest":
			c, err := pyroscope.New(pyroscope.Config{URL: url, API: pyroscope.API(api), Host: "node-e2e", Pacer: pace})
			if err != nil {
				t.Fatal(err)
			}
			send = func() []error { return c.Send(context.Background(), series) }
		case "otlp":
			c, err := otlp.New(otlp.Config{Endpoint: url, Protocol: otlp.GRPC})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			o := &otlpSender{client: c, host: "node-e2e", log: slog.New(slog.DiscardHandler), pace: pace}
			send = func() []error { return o.send(context.Background(), series) }
		}
		began := time.Now()
		errs := send()
		took := time.Since(began)
		for _, err := range errs {
			if err != nil {
				t.Fatalf("%s: %v", api, err)
			}
		}
		t.Logf("%s: %d services delivered in %v", api, len(series), took.Round(time.Millisecond))
		if took > interval {
			t.Errorf("%s: %d services took %v, longer than the %v interval", api, len(series), took, interval)
		}
	}
	// Every service holds its 465 samples of 1/19 s, once.
	const want = 465 * int64(time.Second/19)
	for _, api := range []string{"push", "ingest", "otlp"} {
		totals := waitForServices(t, q, api+"-svc", 200, want, from.Add(-10*time.Second), time.Now().Add(10*time.Second))
		bad := 0
		for svc, n := range totals {
			if n != want {
				bad++
				if bad <= 5 {
					t.Errorf("%s: %s holds %d ns, want %d (465 samples of 1/19 s)", api, svc, n, want)
				}
			}
		}
		t.Logf("%s: %d services on the server, %d with a total other than 465 samples", api, len(totals), bad)
	}
}

// querierClient queries the server at url as Grafana's clients do,
// saying that it takes label names with dots: the query
// API leaves those out of its answers to clients that do not, so OTLP
// resource attributes, stored under their semantic-convention names
// (host.name, container.id), would look lost.
func querierClient(url string) querierv1connect.QuerierServiceClient {
	return querierv1connect.NewQuerierServiceClient(&http.Client{Transport: utf8Labels{}}, url)
}

// utf8Labels declares the client capability allow-utf8-labelnames in
// the Accept header, as Pyroscope's query API reads it.
type utf8Labels struct{}

func (utf8Labels) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Accept", "*/*; allow-utf8-labelnames=true")
	return http.DefaultTransport.RoundTrip(r)
}

// waitForServices returns the CPU total of each service named prefix…
// on the server, waiting up to a minute for n services of want each, as
// freshly ingested profiles become queryable only once indexed.
func waitForServices(t *testing.T, q querierv1connect.QuerierServiceClient, prefix string, n int, want int64, from, to time.Time) map[string]int64 {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		sum := typesv1.TimeSeriesAggregationType_TIME_SERIES_AGGREGATION_TYPE_SUM
		resp, err := q.SelectSeries(context.Background(), connect.NewRequest(&querierv1.SelectSeriesRequest{
			ProfileTypeID: cpuType, LabelSelector: fmt.Sprintf(`{service_name=~"%s.*"}`, prefix),
			Start: from.UnixMilli(), End: to.UnixMilli(), GroupBy: []string{"service_name"},
			Step: to.Sub(from).Seconds(), Aggregation: &sum}))
		// A query over segments not yet compacted may time out on a
		// loaded host: try again until the deadline.
		if err != nil && (connect.CodeOf(err) != connect.CodeDeadlineExceeded || time.Now().After(deadline)) {
			t.Fatalf("%s: query: %v", prefix, err)
		}
		if err != nil {
			t.Logf("%s: query: %v; trying again", prefix, err)
			<-time.After(time.Second) // polling the server's index
			continue
		}
		totals := map[string]int64{}
		complete := true
		for _, s := range resp.Msg.Series {
			var svc string
			for _, l := range s.Labels {
				if l.Name == "service_name" {
					svc = l.Value
				}
			}
			for _, p := range s.Points {
				totals[svc] += int64(math.Round(p.Value))
			}
			complete = complete && totals[svc] >= want
		}
		if (len(totals) == n && complete) || time.Now().After(deadline) {
			return totals
		}
		<-time.After(time.Second) // polling the server's index
	}
}

const cpuType = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"

// waitForTotal queries service's merged CPU profile until its total is
// want, as a freshly ingested profile becomes queryable only after the
// server's segments are flushed and indexed; it gives up after a minute
// and returns what it got last.
func waitForTotal(t *testing.T, q querierv1connect.QuerierServiceClient, service string, from, to time.Time, want int64) *profile.Profile {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := q.SelectMergeProfile(context.Background(), connect.NewRequest(&querierv1.SelectMergeProfileRequest{
			ProfileTypeID: cpuType, LabelSelector: fmt.Sprintf(`{service_name=%q}`, service), Start: from.UnixMilli(), End: to.UnixMilli()}))
		var p *profile.Profile
		if err == nil {
			raw, merr := resp.Msg.MarshalVT()
			if p, err = profile.ParseData(raw); merr != nil {
				err = merr
			}
		}
		if err != nil {
			t.Fatalf("%s: query: %v", service, err)
		}
		if totalValue(p) == want || time.Now().After(deadline) {
			if totalValue(p) != want {
				t.Errorf("%s: the server holds %d ns of CPU, want %d (%d samples of %d)", service, totalValue(p), want,
					totalValue(p)/int64(time.Second/99), want/int64(time.Second/99))
			}
			return p
		}
		<-time.After(time.Second) // polling the server's index
	}
}

func totalValue(p *profile.Profile) int64 {
	var n int64
	for _, s := range p.Sample {
		n += s.Value[0]
	}
	return n
}

// leafShares is each leaf function's share of p's total.
func leafShares(p *profile.Profile) map[string]float64 {
	shares := map[string]float64{}
	total := float64(totalValue(p))
	for _, s := range p.Sample {
		if len(s.Location) > 0 && len(s.Location[0].Line) > 0 {
			shares[s.Location[0].Line[0].Function.Name] += float64(s.Value[0]) / total
		}
	}
	return shares
}

// filesShares is leafShares of the agent's own files for service.
func filesShares(t *testing.T, dir, service string) map[string]float64 {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*_"+service+"*"+fileSuffix))
	if err != nil || len(files) == 0 {
		t.Fatalf("no files of %s in %s: %v", service, dir, err)
	}
	var merged []*profile.Profile
	for _, f := range files {
		merged = append(merged, readPprof(t, f))
	}
	p, err := profile.Merge(merged)
	if err != nil {
		t.Fatal(err)
	}
	return leafShares(p)
}

// seriesLabels returns the label sets of service's series, each as sorted
// name=value pairs.
func seriesLabels(t *testing.T, q querierv1connect.QuerierServiceClient, service string, from, to time.Time) []string {
	t.Helper()
	resp, err := q.Series(context.Background(), connect.NewRequest(&querierv1.SeriesRequest{
		Matchers: []string{fmt.Sprintf(`{service_name=%q,__profile_type__=%q}`, service, cpuType)}, Start: from.UnixMilli(), End: to.UnixMilli()}))
	if err != nil {
		t.Fatalf("%s: series: %v", service, err)
	}
	var out []string
	for _, ls := range resp.Msg.LabelsSet {
		var pairs []string
		for _, l := range ls.Labels {
			pairs = append(pairs, l.Name+"="+l.Value)
		}
		slices.Sort(pairs)
		out = append(out, strings.Join(pairs, ","))
	}
	return out
}

// checkLabels checks the labels each API gives a series: the configured
// host and env for Pyroscope's APIs, the resource attributes for OTLP, and
// container_id (container.id) for the containerised service.
func checkLabels(t *testing.T, tag, service string, sets []string) {
	t.Helper()
	if len(sets) != 1 {
		t.Errorf("%s: %d series, want 1: %v", service, len(sets), sets)
		return
	}
	want := []string{"service_name=" + service}
	if strings.HasPrefix(tag, "otlp") {
		want = append(want, "host.name=node-e2e")
		if strings.HasPrefix(service, "db-") {
			want = append(want, "container.id="+e2eContainer)
		}
		if strings.Contains(sets[0], "process.pid=") {
			t.Errorf("%s: process.pid is a series label: a series per process", service)
		}
	} else {
		want = append(want, "host=node-e2e", "env=e2e")
		if strings.HasPrefix(service, "db-") {
			want = append(want, "container_id="+e2eContainer)
		}
	}
	have := strings.Split(sets[0], ",")
	for _, w := range want {
		if !slices.Contains(have, w) {
			t.Errorf("%s: label %s missing from %v", service, w, sets[0])
		}
	}
}
