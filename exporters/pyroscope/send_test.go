package pyroscope

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sprof/sprof/exporters/pyroscope/pyroscopetest"
)

// TestSendManyServicesInOneFlush is the 200-service host: against the
// server's latency (every request waits for the next segment flush) the
// whole interval must arrive within one flush, not one flush per series.
func TestSendManyServicesInOneFlush(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := pyroscopetest.NewServer()
		c, err := New(Config{URL: "http://pyroscope:4040", HTTPClient: fake.Client()})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := c.Push(context.Background(), pyroscopetest.ServicesProfile(200, 3, 1)); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > fake.FlushEvery {
			t.Errorf("200 services took %v (%d requests), want at most one flush (%v)", d, fake.Requests(), fake.FlushEvery)
		}
		services := map[string]int64{}
		for _, fp := range fake.Profiles() {
			services[fp.Labels["service_name"]] += totalCount(check(t, fp.Profile))
		}
		if len(services) != 200 || services["svc000"] != 6 || services["svc199"] != 6 {
			t.Errorf("%d services arrived (svc000: %d, svc199: %d samples), want 200 of 6 each",
				len(services), services["svc000"], services["svc199"])
		}
	})
}

// TestSendBoundsConcurrency: /ingest takes one profile per request, so 20
// services make 20 requests; at most Concurrency are under way at once,
// and the interval costs ⌈20/Concurrency⌉ flushes.
func TestSendBoundsConcurrency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := pyroscopetest.NewServer()
		c, err := New(Config{URL: "http://pyroscope:4040", API: Ingest, Concurrency: 4, HTTPClient: fake.Client()})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := c.Push(context.Background(), pyroscopetest.ServicesProfile(20, 3, 1)); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 5*fake.FlushEvery {
			t.Errorf("20 requests, 4 at a time, took %v; want 5 flushes (%v)", d, 5*fake.FlushEvery)
		}
		if fake.MaxInFlight() != 4 || len(fake.Profiles()) != 20 {
			t.Errorf("%d requests under way at most, %d profiles; want 4 and 20", fake.MaxInFlight(), len(fake.Profiles()))
		}
	})
}

// TestSendReportsPerSeries: a request refused for good fails the series
// it carried, and only those.
func TestSendReportsPerSeries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := pyroscopetest.NewServer()
		fake.FailNext(pyroscopetest.HTTPStatus(http.StatusBadRequest))
		c, err := New(Config{URL: "http://pyroscope:4040", API: Ingest, Concurrency: 1, HTTPClient: fake.Client()})
		if err != nil {
			t.Fatal(err)
		}
		p := pyroscopetest.ServicesProfile(3, 3, 1)
		errs := c.Send(context.Background(), Split(p, Services("", p.Samples, "")))
		if len(errs) != 3 || errs[0] == nil || Retryable(errs[0]) || errs[1] != nil || errs[2] != nil {
			t.Errorf("errors %v, want only the first series refused", errs)
		}
	})
}

// TestSendPacesToRateLimit: 200 services of 30 stacks of 20 frames, about
// 7 MB of pprof, are more than the server's rate limit lets through at
// once (a 2 MiB burst, 4 MiB/s). Sent in one go, the server would refuse
// some profiles of a request and keep the others, and sending the
// request again would store those twice; paced, every profile is stored
// once, none is refused, and the interval still takes a fraction of a
// 15 s interval.
func TestSendPacesToRateLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := pyroscopetest.NewServer()
		c, err := New(Config{URL: "http://pyroscope:4040", HTTPClient: fake.Client()})
		if err != nil {
			t.Fatal(err)
		}
		p := pyroscopetest.ServicesProfile(200, 30, 20)
		start := time.Now()
		errs := c.Send(context.Background(), Split(p, Services("", p.Samples, "")))
		took := time.Since(start)
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		services := map[string]int64{}
		var cost int
		for _, fp := range fake.Profiles() {
			services[fp.Labels["service_name"]] += totalCount(check(t, fp.Profile))
			var buf bytes.Buffer
			fp.Profile.WriteUncompressed(&buf)
			cost += buf.Len()
		}
		if fake.RateLimited() != 0 || len(services) != 200 || services["svc000"] != 465 || services["svc199"] != 465 {
			t.Errorf("%d profiles refused; %d services stored (svc000: %d, svc199: %d samples), want 200 of 465 each",
				fake.RateLimited(), len(services), services["svc000"], services["svc199"])
		}
		// What is over the burst waits for tokens at the paced rate.
		limits := DefaultLimits()
		least := time.Duration(float64(cost-limits.IngestionBurst) / limits.IngestionRate * float64(time.Second))
		t.Logf("%d bytes of pprof in %d requests took %v", cost, fake.Requests(), took)
		if took < least || took > 5*time.Second {
			t.Errorf("took %v, want between %v (the rate limit) and 5s", took, least)
		}
	})
}

// TestSendReusesConnections: /ingest sends one request per profile, 40
// here in rounds of Concurrency; every round reuses the connections of
// the one before instead of opening new ones (the default transport
// keeps two idle).
func TestSendReusesConnections(t *testing.T) {
	fake := pyroscopetest.NewServer()
	var opened atomic.Int32
	srv := httptest.NewUnstartedServer(fake.Handler())
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	c, err := New(Config{URL: srv.URL, API: Ingest, Concurrency: 8})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Push(context.Background(), pyroscopetest.ServicesProfile(40, 3, 1)); err != nil {
		t.Fatal(err)
	}
	if n := opened.Load(); n > 8 || len(fake.Profiles()) != 40 {
		t.Errorf("%d connections for %d profiles, 8 at a time; want at most 8", n, len(fake.Profiles()))
	}
}

// TestIngestManyServices: /ingest takes one profile per request, so 200
// services make 200 requests, each answered at a segment flush; 32 at a
// time they take ⌈200/32⌉ = 7 flushes, well within an interval, where 8
// at a time took 25.
func TestIngestManyServices(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := pyroscopetest.NewServer()
		c, err := New(Config{URL: "http://pyroscope:4040", API: Ingest, HTTPClient: fake.Client()})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := c.Push(context.Background(), pyroscopetest.ServicesProfile(200, 3, 1)); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 7*fake.FlushEvery || len(fake.Profiles()) != 200 {
			t.Errorf("200 services took %v (%d profiles), want at most 7 flushes (%v)", d, len(fake.Profiles()), 7*fake.FlushEvery)
		}
	})
}
