package pyroscope

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sprof/sprof/exporters/pyroscope/pyroscopetest"
)

// TestSendBoundsConcurrency: one profile a request, so 20 services make
// 20 requests; at most Concurrency are under way at once, and the
// interval costs ⌈20/Concurrency⌉ flushes.
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

// TestSendReusesConnections: one request per profile, 40 here in rounds
// of Concurrency; every round reuses the connections of
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

// TestSendManyServices is the 200-service host: every profile goes in a
// request of its own, each answered at a segment flush, so 32 at a time
// they take ⌈200/32⌉ = 7 flushes, well within an interval, where one
// after another took 200; every service arrives whole.
func TestSendManyServices(t *testing.T) {
	for _, api := range []API{Push, Ingest} {
		t.Run(string(api), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fake := pyroscopetest.NewServer()
				c, err := New(Config{URL: "http://pyroscope:4040", API: api, HTTPClient: fake.Client()})
				if err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				if err := c.Push(context.Background(), pyroscopetest.ServicesProfile(200, 3, 1)); err != nil {
					t.Fatal(err)
				}
				if d := time.Since(start); d > 7*fake.FlushEvery {
					t.Errorf("200 services took %v (%d requests), want at most 7 flushes (%v)", d, fake.Requests(), 7*fake.FlushEvery)
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
		})
	}
}

// TestSendRateLimitedOnce: the tenant's rate limit is spent by others
// (another agent), so the server refuses some profiles with
// ResourceExhausted and stores the rest of their request. The refused
// ones are sent again until stored, and every profile is stored exactly
// once: a Push answer says neither which profiles were refused nor which
// were kept, so a request that carried several would store the kept ones
// twice when sent again.
func TestSendRateLimitedOnce(t *testing.T) {
	for _, api := range []API{Push, Ingest} {
		t.Run(string(api), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fake := pyroscopetest.NewServer()
				fake.IngestionRate, fake.IngestionBurst = 2000, 2000 // a few profiles a second
				c, err := New(Config{URL: "http://pyroscope:4040", API: api, HTTPClient: fake.Client(), Attempts: 30, Backoff: 100 * time.Millisecond})
				if err != nil {
					t.Fatal(err)
				}
				p := pyroscopetest.ServicesProfile(12, 3, 1)
				for _, err := range c.Send(context.Background(), Split(p, Services("", p.Samples, ""))) {
					if err != nil {
						t.Fatal(err)
					}
				}
				stored := map[string]int{}
				for _, fp := range fake.Profiles() {
					stored[fp.Labels["service_name"]]++
				}
				for i := range 12 {
					if svc := fmt.Sprintf("svc%03d", i); stored[svc] != 1 {
						t.Errorf("%s stored %d times, want once", svc, stored[svc])
					}
				}
				if fake.RateLimited() == 0 {
					t.Error("no profile was refused: the test tests nothing")
				}
			})
		})
	}
}
