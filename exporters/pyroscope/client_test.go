package pyroscope

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/pprof/profile"
	pushv1 "github.com/grafana/pyroscope/api/gen/proto/go/push/v1"
	"github.com/grafana/pyroscope/api/gen/proto/go/push/v1/pushv1connect"

	"github.com/sprof/sprof/exporters"
	"github.com/sprof/sprof/stacks"
)

// fakePyroscope is a Push API server built from the api module's own
// handler. It records what arrives and answers with the queued errors
// first.
type fakePyroscope struct {
	mu       sync.Mutex
	requests []*pushv1.PushRequest
	headers  []http.Header
	fail     []error
}

func (f *fakePyroscope) Push(_ context.Context, req *connect.Request[pushv1.PushRequest]) (*connect.Response[pushv1.PushResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, req.Msg)
	f.headers = append(f.headers, req.Header().Clone())
	if len(f.fail) > 0 {
		err := f.fail[0]
		f.fail = f.fail[1:]
		return nil, err
	}
	return connect.NewResponse(&pushv1.PushResponse{}), nil
}

// start serves f on 127.0.0.1 and returns the base URL.
func (f *fakePyroscope) start(t *testing.T) string {
	t.Helper()
	mux := http.NewServeMux()
	path, h := pushv1connect.NewPusherServiceHandler(f)
	mux.Handle(path, h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// testProfile has two processes (web ×2 pids, db), a stack deeper than
// Pyroscope keeps, and a truncated stack.
func testProfile(start time.Time) *stacks.Profile {
	exe := &stacks.Mapping{Kind: stacks.User, Start: 0x400000, Limit: 0x800000, File: "/usr/bin/web", BuildID: "abcd"}
	loc := func(i int) *stacks.Location {
		return &stacks.Location{Mapping: exe, Address: 0x400000 + uint64(i), Frames: []stacks.Frame{{Function: fmt.Sprintf("f%d", i)}}}
	}
	var deep []*stacks.Location
	for i := range 1500 {
		deep = append(deep, loc(i))
	}
	return &stacks.Profile{
		Start: start, Duration: 15 * time.Second, Period: time.Second / 19, Mappings: []*stacks.Mapping{exe},
		Samples: []*stacks.Sample{
			{Stack: []*stacks.Location{loc(1), loc(2)}, Count: 5, Pid: 10, Tid: 11, Comm: "web"},
			{Stack: []*stacks.Location{loc(1), loc(2)}, Count: 2, Pid: 10, Tid: 12, Comm: "web"},
			{Stack: []*stacks.Location{loc(3)}, Count: 1, Pid: 20, Tid: 20, Comm: "web"},
			{Stack: deep, Count: 1, Pid: 30, Tid: 30, Comm: "db"},
			{Stack: []*stacks.Location{loc(4)}, Count: 3, Pid: 30, Tid: 31, Comm: "db", Truncated: true},
		},
	}
}

// decode parses and checks a raw profile as the server would.
func decode(t *testing.T, raw []byte) *profile.Profile {
	t.Helper()
	if !bytes.HasPrefix(raw, []byte{0x1f, 0x8b}) {
		t.Fatalf("raw profile is not gzip: % x", raw[:min(4, len(raw))])
	}
	p, err := profile.ParseData(raw)
	if err != nil {
		t.Fatalf("server cannot parse the profile: %v", err)
	}
	if err := exporters.CheckPprof(p); err != nil {
		t.Fatalf("profile fails the server's rules: %v", err)
	}
	return p
}

func labelString(rs *pushv1.RawProfileSeries) string {
	var parts []string
	for _, l := range rs.Labels {
		parts = append(parts, l.Name+"="+l.Value)
	}
	return strings.Join(parts, ",")
}

func totalCount(p *profile.Profile) int64 {
	var n int64
	for _, s := range p.Sample {
		n += s.Value[0]
	}
	return n
}

func TestPushLabelsAndProfiles(t *testing.T) {
	fake := &fakePyroscope{}
	start := time.Now().Add(-time.Minute).Truncate(time.Second)
	c, err := New(Config{URL: fake.start(t), Host: "node-1", Labels: map[string]string{"env": "prod"},
		BearerToken: "s3cret", TenantID: "team-a"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Push(context.Background(), testProfile(start)); err != nil {
		t.Fatal(err)
	}
	if len(fake.requests) != 2 {
		t.Fatalf("%d requests, want one per service (db, web)", len(fake.requests))
	}
	wantLabels := []string{
		"__name__=process_cpu,env=prod,host=node-1,service_name=db",
		"__name__=process_cpu,env=prod,host=node-1,service_name=web",
	}
	wantCounts := []int64{4, 8}
	for i, req := range fake.requests {
		h := fake.headers[i]
		if h.Get("Content-Type") != "application/proto" || h.Get("Authorization") != "Bearer s3cret" || h.Get("X-Scope-OrgID") != "team-a" {
			t.Errorf("request %d headers: %v", i, h)
		}
		if len(req.Series) != 1 || len(req.Series[0].Samples) != 1 {
			t.Fatalf("request %d: %d series", i, len(req.Series))
		}
		rs := req.Series[0]
		if got := labelString(rs); got != wantLabels[i] {
			t.Errorf("series %d labels %s, want %s", i, got, wantLabels[i])
		}
		if id := rs.Samples[0].ID; len(id) != 36 || id[14] != '4' {
			t.Errorf("sample ID %q is not a UUID v4", id)
		}
		p := decode(t, rs.Samples[0].RawProfile)
		if p.TimeNanos != start.UnixNano() || p.DurationNanos != 15e9 || p.Period != int64(time.Second/19) {
			t.Errorf("time %d duration %d period %d", p.TimeNanos, p.DurationNanos, p.Period)
		}
		if got := totalCount(p); got != wantCounts[i] {
			t.Errorf("series %d: %d samples, want %d", i, got, wantCounts[i])
		}
		for _, s := range p.Sample {
			if len(s.Label) != 0 || len(s.NumLabel) != 0 {
				t.Errorf("per-sample labels %v %v sent to Pyroscope", s.Label, s.NumLabel)
			}
			if len(s.Location) > 1000 {
				t.Errorf("stack of %d locations, over Pyroscope's 1,000", len(s.Location))
			}
		}
	}
}

func TestPushServiceName(t *testing.T) {
	fake := &fakePyroscope{}
	c, err := New(Config{URL: fake.start(t), ServiceName: "checkout", ProcessRoot: exporters.CommRoot})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Push(context.Background(), testProfile(time.Now())); err != nil {
		t.Fatal(err)
	}
	if len(fake.requests) != 1 || labelString(fake.requests[0].Series[0]) != "__name__=process_cpu,service_name=checkout" {
		t.Fatalf("requests %v", fake.requests)
	}
	p := decode(t, fake.requests[0].Series[0].Samples[0].RawProfile)
	if got := totalCount(p); got != 12 {
		t.Errorf("%d samples, want all 12", got)
	}
	roots := map[string]int64{}
	for _, s := range p.Sample {
		roots[s.Location[len(s.Location)-1].Line[0].Function.Name] += s.Value[0]
	}
	if len(roots) != 2 || roots["web"] != 8 || roots["db"] != 4 {
		t.Errorf("root frames %v, want web: 8, db: 4", roots)
	}
}

// wideProfile has n distinct stacks of depth frames each.
func wideProfile(n, depth int) *stacks.Profile {
	exe := &stacks.Mapping{Kind: stacks.User, Start: 0x400000, Limit: 0x40000000, File: "/usr/bin/wide"}
	p := &stacks.Profile{Start: time.Now(), Duration: time.Second, Period: 1e7, Mappings: []*stacks.Mapping{exe}}
	for i := range n {
		var st []*stacks.Location
		for d := range depth {
			addr := 0x400000 + uint64(i*depth+d)
			st = append(st, &stacks.Location{Mapping: exe, Address: addr,
				Frames: []stacks.Frame{{Function: fmt.Sprintf("function_%d_%d", i, d), File: "/src/wide.c", Line: d + 1}}})
		}
		p.Samples = append(p.Samples, &stacks.Sample{Stack: st, Count: 1, Pid: 1, Comm: "wide"})
	}
	return p
}

func TestPushSplitsAtLimits(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits Limits
		p      *stacks.Profile
	}{
		{"samples", Limits{}, wideProfile(20_000, 2)},
		{"bytes", Limits{MaxBytes: 128 << 10}, wideProfile(1_500, 20)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := &fakePyroscope{}
			c, err := New(Config{URL: fake.start(t), Limits: tc.limits})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Push(context.Background(), tc.p); err != nil {
				t.Fatal(err)
			}
			lim := c.limits
			var parts int
			var total int64
			for _, req := range fake.requests {
				for _, raw := range req.Series[0].Samples {
					p := decode(t, raw.RawProfile)
					var buf bytes.Buffer
					p.WriteUncompressed(&buf)
					if len(p.Sample) > lim.MaxSamples || buf.Len() > lim.MaxBytes {
						t.Errorf("part of %d samples, %d bytes: over the limits %d, %d", len(p.Sample), buf.Len(), lim.MaxSamples, lim.MaxBytes)
					}
					total += totalCount(p)
					parts++
				}
			}
			if parts < 2 || total != int64(len(tc.p.Samples)) {
				t.Errorf("%d parts with %d samples in all, want ≥ 2 parts and %d samples", parts, total, len(tc.p.Samples))
			}
		})
	}
}

func TestPushRetries(t *testing.T) {
	for _, tc := range []struct {
		name      string
		fail      []error
		wantCalls int
		wantErr   bool
		retryable bool
	}{
		{"transient then ok", []error{connect.NewError(connect.CodeUnavailable, errors.New("down")),
			connect.NewError(connect.CodeResourceExhausted, errors.New("429"))}, 3, false, false},
		{"invalid is final", []error{connect.NewError(connect.CodeInvalidArgument, errors.New("bad"))}, 1, true, false},
		{"unauthenticated is final", []error{connect.NewError(connect.CodeUnauthenticated, errors.New("who"))}, 1, true, false},
		{"attempts run out", []error{connect.NewError(connect.CodeInternal, errors.New("a")),
			connect.NewError(connect.CodeInternal, errors.New("b")), connect.NewError(connect.CodeInternal, errors.New("c"))}, 3, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := &fakePyroscope{fail: tc.fail}
			c, err := New(Config{URL: fake.start(t), ServiceName: "svc", Backoff: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			err = c.Push(context.Background(), testProfile(time.Now()))
			if (err != nil) != tc.wantErr || len(fake.requests) != tc.wantCalls {
				t.Fatalf("error %v after %d calls; want error=%v after %d", err, len(fake.requests), tc.wantErr, tc.wantCalls)
			}
			if err != nil && Retryable(err) != tc.retryable {
				t.Errorf("Retryable(%v) = %v", err, !tc.retryable)
			}
			if tc.wantCalls > 1 && fake.requests[0].Series[0].Samples[0].ID != fake.requests[1].Series[0].Samples[0].ID {
				t.Error("a retry changed the profile ID; the server could not tell it is the same profile")
			}
		})
	}
}

func TestPushServerDown(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	c, err := New(Config{URL: url, ServiceName: "svc", Backoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	err = c.Push(context.Background(), testProfile(time.Now()))
	if err == nil || !Retryable(err) {
		t.Errorf("push to a closed port: %v, want a retryable error", err)
	}
}

func TestPushSkipsEmptySeries(t *testing.T) {
	fake := &fakePyroscope{}
	c, err := New(Config{URL: fake.start(t)})
	if err != nil {
		t.Fatal(err)
	}
	p := testProfile(time.Now())
	p.Samples[0].Count = 0
	p.Samples = p.Samples[:1]
	if err := c.Push(context.Background(), p); err != nil || len(fake.requests) != 0 {
		t.Errorf("profile without counts: %v, %d requests; want nothing sent", err, len(fake.requests))
	}
}

func TestPushRefusesOldProfiles(t *testing.T) {
	fake := &fakePyroscope{}
	c, err := New(Config{URL: fake.start(t)})
	if err != nil {
		t.Fatal(err)
	}
	err = c.Push(context.Background(), testProfile(time.Now().Add(-2*time.Hour)))
	if !errors.Is(err, ErrTooOld) || Retryable(err) || len(fake.requests) != 0 {
		t.Errorf("error %v, %d requests; want ErrTooOld and nothing sent", err, len(fake.requests))
	}
}

func TestConfigChecks(t *testing.T) {
	long := strings.Repeat("x", 2049)
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no URL", Config{}, "URL"},
		{"ftp URL", Config{URL: "ftp://x"}, "URL"},
		{"bad API", Config{URL: "http://x", API: "grpc"}, "API"},
		{"reserved label", Config{URL: "http://x", Labels: map[string]string{"__name__": "x"}}, "__"},
		{"service label", Config{URL: "http://x", Labels: map[string]string{"service_name": "x"}}, "own option"},
		{"container label", Config{URL: "http://x", Labels: map[string]string{"container_id": "x"}}, "sprof sets it"},
		{"bad label name", Config{URL: "http://x", Labels: map[string]string{"1abc": "x"}}, "names are"},
		{"long value", Config{URL: "http://x", Labels: map[string]string{"a": long}}, "2048"},
		{"both auths", Config{URL: "http://x", BearerToken: "t", BasicAuthUser: "u"}, "exclusive"},
		{"too many labels", Config{URL: "http://x", Labels: manyLabels(27)}, "at most 30"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	if _, err := New(Config{URL: "https://x/", Labels: map[string]string{"k8s.namespace": "a", "env": "b"}}); err != nil {
		t.Errorf("a valid config was refused: %v", err)
	}
	// __name__, service_name, host, container_id and 26 more make 30.
	if _, err := New(Config{URL: "https://x/", Host: "h", Labels: manyLabels(26)}); err != nil {
		t.Errorf("30 labels were refused: %v", err)
	}
}

func manyLabels(n int) map[string]string {
	m := map[string]string{}
	for i := range n {
		m[fmt.Sprintf("l%d", i)] = "v"
	}
	return m
}

func TestIngest(t *testing.T) {
	type got struct {
		query   map[string]string
		profile []byte
		auth    string
	}
	var mu sync.Mutex
	var posts []got
	var failFirst = true
	mux := http.NewServeMux()
	mux.HandleFunc("POST /ingest", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if failFirst {
			failFirst = false
			http.Error(w, "slow down", http.StatusTooManyRequests)
			return
		}
		f, _, err := r.FormFile("profile")
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		raw, _ := io.ReadAll(f)
		q := map[string]string{}
		for k := range r.URL.Query() {
			q[k] = r.URL.Query().Get(k)
		}
		user, pass, _ := r.BasicAuth()
		posts = append(posts, got{q, raw, user + ":" + pass})
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	start := time.Unix(time.Now().Unix()-30, 0)
	c, err := New(Config{URL: srv.URL, API: Ingest, Host: "node-1", Labels: map[string]string{"env": "prod"},
		BasicAuthUser: "u", BasicAuthPassword: "p", Backoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Push(context.Background(), testProfile(start)); err != nil {
		t.Fatal(err)
	}
	if len(posts) != 2 {
		t.Fatalf("%d posts, want 2", len(posts))
	}
	for i, want := range []string{"db{env=prod,host=node-1}", "web{env=prod,host=node-1}"} {
		q := posts[i].query
		if q["name"] != want || q["format"] != "pprof" || q["spyName"] != "sprof" || q["sampleRate"] != "19" ||
			q["from"] != fmt.Sprint(start.Unix()) || q["until"] != fmt.Sprint(start.Unix()+15) {
			t.Errorf("post %d query %v, want name %s", i, q, want)
		}
		if posts[i].auth != "u:p" {
			t.Errorf("post %d basic auth %q", i, posts[i].auth)
		}
		decode(t, posts[i].profile)
	}
}

func TestIngestName(t *testing.T) {
	c, err := New(Config{URL: "http://x", Labels: map[string]string{"team": "a,b{c}"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.ingestName(Series{Service: "my app:v2"}); got != "my_app_v2{team=a_b_c_}" {
		t.Errorf("ingestName = %q", got)
	}
	if got := c.ingestName(Series{Service: "web", Container: containerA}); got != "web{container_id="+containerA+",team=a_b_c_}" {
		t.Errorf("ingestName with a container = %q", got)
	}
	c.cfg.Labels = nil
	if got := c.ingestName(Series{Service: "web"}); got != "web{}" {
		t.Errorf("ingestName without labels = %q", got)
	}
}

// TestPushIntervals pushes three consecutive intervals, as the agent does,
// and checks each arrives as its own profile at its own time.
func TestPushIntervals(t *testing.T) {
	fake := &fakePyroscope{}
	c, err := New(Config{URL: fake.start(t), ServiceName: "svc", Host: "h"})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(-45 * time.Second).Truncate(time.Second)
	for i := range 3 {
		if err := c.Push(context.Background(), testProfile(start.Add(time.Duration(i)*15*time.Second))); err != nil {
			t.Fatalf("interval %d: %v", i, err)
		}
	}
	if len(fake.requests) != 3 {
		t.Fatalf("%d requests, want 3", len(fake.requests))
	}
	ids := map[string]bool{}
	for i, req := range fake.requests {
		rs := req.Series[0]
		if labelString(rs) != "__name__=process_cpu,host=h,service_name=svc" {
			t.Errorf("interval %d labels %s", i, labelString(rs))
		}
		p := decode(t, rs.Samples[0].RawProfile)
		if want := start.Add(time.Duration(i) * 15 * time.Second).UnixNano(); p.TimeNanos != want {
			t.Errorf("interval %d at %d, want %d", i, p.TimeNanos, want)
		}
		ids[rs.Samples[0].ID] = true
	}
	if len(ids) != 3 {
		t.Errorf("%d distinct profile IDs over 3 intervals", len(ids))
	}
}

// TestPushOffCPU: a profile with off-CPU time reaches each service's
// series with off_cpu/nanoseconds beside the CPU sample types, which
// Pyroscope files as a profile type of its own; a service whose threads
// only waited gets its series too.
func TestPushOffCPU(t *testing.T) {
	fake := &fakePyroscope{}
	start := time.Now().Add(-time.Minute).Truncate(time.Second)
	c, err := New(Config{URL: fake.start(t)})
	if err != nil {
		t.Fatal(err)
	}
	p := testProfile(start)
	p.OffCPU = true
	p.Samples[0].OffCPU = 40 * time.Millisecond
	p.Samples = append(p.Samples, &stacks.Sample{Stack: p.Samples[2].Stack, OffCPU: 2 * time.Second, Pid: 40, Tid: 40, Comm: "cron"})
	if err := c.Push(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	offCPU := map[string]int64{}
	for _, req := range fake.requests {
		rs := req.Series[0]
		pp := decode(t, rs.Samples[0].RawProfile)
		var types []string
		for _, st := range pp.SampleType {
			types = append(types, st.Type+":"+st.Unit)
		}
		if strings.Join(types, " ") != "samples:count cpu:nanoseconds off_cpu:nanoseconds" {
			t.Errorf("series %s: sample types %v", labelString(rs), types)
		}
		for _, s := range pp.Sample {
			offCPU[labelString(rs)] += s.Value[2]
		}
	}
	want := map[string]int64{
		"__name__=process_cpu,service_name=cron": int64(2 * time.Second),
		"__name__=process_cpu,service_name=db":   0,
		"__name__=process_cpu,service_name=web":  int64(40 * time.Millisecond),
	}
	if !maps.Equal(offCPU, want) {
		t.Errorf("off-CPU time per series %v, want %v", offCPU, want)
	}
}
