package pyroscope

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/pprof/profile"

	"github.com/sprof/sprof/exporters"
	"github.com/sprof/sprof/exporters/pyroscope/pyroscopetest"
	"github.com/sprof/sprof/stacks"
)

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

// check runs the checks sprof promises on top of the server's.
func check(t *testing.T, p *profile.Profile) *profile.Profile {
	t.Helper()
	if err := exporters.CheckPprof(p); err != nil {
		t.Fatalf("profile fails the server's rules: %v", err)
	}
	return p
}

// labelString is labels as name=value pairs sorted by name.
func labelString(labels map[string]string) string {
	var parts []string
	for k, v := range labels {
		parts = append(parts, k+"="+v)
	}
	slices.Sort(parts)
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
	fake := pyroscopetest.NewServer()
	start := time.Now().Add(-time.Minute).Truncate(time.Second)
	c, err := New(Config{URL: fake.Start(t), Host: "node-1", Labels: map[string]string{"env": "prod"},
		BearerToken: "s3cret", TenantID: "team-a"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Push(context.Background(), testProfile(start)); err != nil {
		t.Fatal(err)
	}
	if fake.Requests() != 2 {
		t.Errorf("%d requests, want one per service (db, web)", fake.Requests())
	}
	got := fake.Profiles()
	if len(got) != 2 {
		t.Fatalf("%d profiles, want one per service (db, web)", len(got))
	}
	slices.SortFunc(got, func(a, b pyroscopetest.Profile) int {
		return strings.Compare(labelString(a.Labels), labelString(b.Labels))
	})
	wantLabels := []string{
		"__name__=process_cpu,env=prod,host=node-1,service_name=db",
		"__name__=process_cpu,env=prod,host=node-1,service_name=web",
	}
	wantCounts := []int64{4, 8}
	for i, fp := range got {
		h := fp.Header
		if h.Get("Content-Type") != "application/proto" || h.Get("Authorization") != "Bearer s3cret" || h.Get("X-Scope-OrgID") != "team-a" {
			t.Errorf("request %d headers: %v", i, h)
		}
		if l := labelString(fp.Labels); l != wantLabels[i] {
			t.Errorf("series %d labels %s, want %s", i, l, wantLabels[i])
		}
		p := check(t, fp.Profile)
		if p.TimeNanos != start.UnixNano() || p.DurationNanos != 15e9 || p.Period != int64(time.Second/19) {
			t.Errorf("time %d duration %d period %d", p.TimeNanos, p.DurationNanos, p.Period)
		}
		if n := totalCount(p); n != wantCounts[i] {
			t.Errorf("series %d: %d samples, want %d", i, n, wantCounts[i])
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
	for _, id := range fake.PushIDs() {
		if len(id) != 36 || id[14] != '4' {
			t.Errorf("sample ID %q is not a UUID v4", id)
		}
	}
}

func TestPushServiceName(t *testing.T) {
	fake := pyroscopetest.NewServer()
	c, err := New(Config{URL: fake.Start(t), ServiceName: "checkout", ProcessRoot: exporters.CommRoot})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Push(context.Background(), testProfile(time.Now())); err != nil {
		t.Fatal(err)
	}
	got := fake.Profiles()
	if len(got) != 1 || labelString(got[0].Labels) != "__name__=process_cpu,service_name=checkout" {
		t.Fatalf("profiles %v", got)
	}
	p := check(t, got[0].Profile)
	if n := totalCount(p); n != 12 {
		t.Errorf("%d samples, want all 12", n)
	}
	roots := map[string]int64{}
	for _, s := range p.Sample {
		roots[s.Location[len(s.Location)-1].Line[0].Function.Name] += s.Value[0]
	}
	if len(roots) != 2 || roots["web"] != 8 || roots["db"] != 4 {
		t.Errorf("root frames %v, want web: 8, db: 4", roots)
	}
}

func TestPushSplitsAtLimits(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits Limits
		p      *stacks.Profile
	}{
		{"samples", Limits{IngestionRate: -1}, pyroscopetest.WideProfile(20_000, 2)},
		{"bytes", Limits{MaxBytes: 128 << 10, IngestionRate: -1}, pyroscopetest.WideProfile(1_500, 20)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := pyroscopetest.NewServer()
			fake.IngestionRate = 0 // one request per series, whatever its size
			c, err := New(Config{URL: fake.Start(t), Limits: tc.limits})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Push(context.Background(), tc.p); err != nil {
				t.Fatal(err)
			}
			lim := c.limits
			var total int64
			got := fake.Profiles()
			for _, fp := range got {
				p := check(t, fp.Profile)
				var buf bytes.Buffer
				p.WriteUncompressed(&buf)
				if len(p.Sample) > lim.MaxSamples || buf.Len() > lim.MaxBytes {
					t.Errorf("part of %d samples, %d bytes: over the limits %d, %d", len(p.Sample), buf.Len(), lim.MaxSamples, lim.MaxBytes)
				}
				total += totalCount(p)
			}
			if len(got) < 2 || total != int64(len(tc.p.Samples)) {
				t.Errorf("%d parts with %d samples in all, want ≥ 2 parts and %d samples", len(got), total, len(tc.p.Samples))
			}
			if fake.Requests() != len(got) {
				t.Errorf("%d requests for %d parts, want one each", fake.Requests(), len(got))
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
			fake := pyroscopetest.NewServer()
			fake.FailNext(tc.fail...)
			c, err := New(Config{URL: fake.Start(t), ServiceName: "svc", Backoff: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			err = c.Push(context.Background(), testProfile(time.Now()))
			if (err != nil) != tc.wantErr || fake.Requests() != tc.wantCalls {
				t.Fatalf("error %v after %d calls; want error=%v after %d", err, fake.Requests(), tc.wantErr, tc.wantCalls)
			}
			if err != nil && Retryable(err) != tc.retryable {
				t.Errorf("Retryable(%v) = %v", err, !tc.retryable)
			}
			if tc.wantCalls > 1 && fake.PushIDs()[0] != fake.PushIDs()[1] {
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
	fake := pyroscopetest.NewServer()
	c, err := New(Config{URL: fake.Start(t)})
	if err != nil {
		t.Fatal(err)
	}
	p := testProfile(time.Now())
	p.Samples[0].Count = 0
	p.Samples = p.Samples[:1]
	if err := c.Push(context.Background(), p); err != nil || fake.Requests() != 0 {
		t.Errorf("profile without counts: %v, %d requests; want nothing sent", err, fake.Requests())
	}
}

func TestPushRefusesOldProfiles(t *testing.T) {
	fake := pyroscopetest.NewServer()
	c, err := New(Config{URL: fake.Start(t)})
	if err != nil {
		t.Fatal(err)
	}
	err = c.Push(context.Background(), testProfile(time.Now().Add(-2*time.Hour)))
	if !errors.Is(err, ErrTooOld) || Retryable(err) || fake.Requests() != 0 {
		t.Errorf("error %v, %d requests; want ErrTooOld and nothing sent", err, fake.Requests())
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
	fake := pyroscopetest.NewServer()
	fake.FailNext(pyroscopetest.HTTPStatus(http.StatusTooManyRequests))
	start := time.Unix(time.Now().Unix()-30, 0)
	c, err := New(Config{URL: fake.Start(t), API: Ingest, Host: "node-1", Labels: map[string]string{"env": "prod"},
		BasicAuthUser: "u", BasicAuthPassword: "p", Backoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Push(context.Background(), testProfile(start)); err != nil {
		t.Fatal(err)
	}
	got := fake.Profiles()
	if len(got) != 2 {
		t.Fatalf("%d profiles accepted, want 2", len(got))
	}
	slices.SortFunc(got, func(a, b pyroscopetest.Profile) int { return strings.Compare(a.Query["name"], b.Query["name"]) })
	for i, want := range []string{"db{env=prod,host=node-1}", "web{env=prod,host=node-1}"} {
		q := got[i].Query
		if q["name"] != want || q["spyName"] != "sprof" || q["sampleRate"] != "19" ||
			q["from"] != fmt.Sprint(start.Unix()) || q["until"] != fmt.Sprint(start.Unix()+15) {
			t.Errorf("post %d query %v, want name %s", i, q, want)
		}
		if user, pass, _ := (&http.Request{Header: got[i].Header}).BasicAuth(); user+":"+pass != "u:p" {
			t.Errorf("post %d basic auth %q", i, user+":"+pass)
		}
		check(t, got[i].Profile)
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
	fake := pyroscopetest.NewServer()
	c, err := New(Config{URL: fake.Start(t), ServiceName: "svc", Host: "h"})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(-45 * time.Second).Truncate(time.Second)
	for i := range 3 {
		if err := c.Push(context.Background(), testProfile(start.Add(time.Duration(i)*15*time.Second))); err != nil {
			t.Fatalf("interval %d: %v", i, err)
		}
	}
	got := fake.Profiles()
	if len(got) != 3 {
		t.Fatalf("%d profiles, want 3", len(got))
	}
	for i, fp := range got {
		if labelString(fp.Labels) != "__name__=process_cpu,host=h,service_name=svc" {
			t.Errorf("interval %d labels %s", i, labelString(fp.Labels))
		}
		p := check(t, fp.Profile)
		if want := start.Add(time.Duration(i) * 15 * time.Second).UnixNano(); p.TimeNanos != want {
			t.Errorf("interval %d at %d, want %d", i, p.TimeNanos, want)
		}
	}
	ids := map[string]bool{}
	for _, id := range fake.PushIDs() {
		ids[id] = true
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
	fake := pyroscopetest.NewServer()
	start := time.Now().Add(-time.Minute).Truncate(time.Second)
	c, err := New(Config{URL: fake.Start(t)})
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
	for _, fp := range fake.Profiles() {
		var types []string
		for _, st := range fp.Profile.SampleType {
			types = append(types, st.Type+":"+st.Unit)
		}
		if strings.Join(types, " ") != "samples:count cpu:nanoseconds off_cpu:nanoseconds" {
			t.Errorf("series %s: sample types %v", labelString(fp.Labels), types)
		}
		for _, s := range fp.Profile.Sample {
			offCPU[labelString(fp.Labels)] += s.Value[2]
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

// TestStorageStarting: a server whose storage is not ready yet answers
// /ingest with 422 and Push with Connect code unknown, quoting the
// storage's Unavailable status: worth trying again, unlike a 422 for a
// profile the server refuses.
func TestStorageStarting(t *testing.T) {
	for _, api := range []API{Push, Ingest} {
		fake := pyroscopetest.NewServer()
		fake.FlushEvery = 0
		fake.SetStarting(true)
		c, err := New(Config{URL: fake.Start(t), API: api, ServiceName: "svc", Attempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		err = c.Push(context.Background(), testProfile(time.Now()))
		if err == nil || !Retryable(err) {
			t.Errorf("%s while the storage starts: %v, want a retryable error", api, err)
		}
		fake.SetStarting(false)
		if err := c.Push(context.Background(), testProfile(time.Now())); err != nil || len(fake.Profiles()) != 1 {
			t.Errorf("%s once the storage is ready: %v, %d profiles stored; want 1", api, err, len(fake.Profiles()))
		}
	}
	refused := &StatusError{Code: http.StatusUnprocessableEntity, Body: `{"code":"unknown","message":"pushing IngestInput-pprof failed ` +
		`push series with index 0 and id  failed: invalid_argument: profile is too old"}`}
	if Retryable(refused) {
		t.Errorf("Retryable(%v) = true", refused)
	}
}
