package pyroscope

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sprof/sprof/exporters/pyroscope/pyroscopetest"
	"github.com/sprof/sprof/stacks"
)

// servicesProfile has one process of its own service for each of n
// services, each with a few stacks.
func servicesProfile(n int) *stacks.Profile {
	exe := &stacks.Mapping{Kind: stacks.User, Start: 0x400000, Limit: 0x800000, File: "/usr/bin/svc"}
	p := &stacks.Profile{Start: time.Now(), Duration: 15 * time.Second, Period: time.Second / 19, Mappings: []*stacks.Mapping{exe}}
	for i := range n {
		for j := range 3 {
			loc := &stacks.Location{Mapping: exe, Address: 0x400000 + uint64(i*3+j), Frames: []stacks.Frame{{Function: fmt.Sprintf("handler%d", j)}}}
			p.Samples = append(p.Samples, &stacks.Sample{Stack: []*stacks.Location{loc}, Count: int64(j + 1),
				Pid: uint32(100 + i), Tid: uint32(100 + i), Comm: fmt.Sprintf("svc%03d", i)})
		}
	}
	return p
}

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
		if err := c.Push(context.Background(), servicesProfile(200)); err != nil {
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
		if err := c.Push(context.Background(), servicesProfile(20)); err != nil {
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
		p := servicesProfile(3)
		errs := c.Send(context.Background(), Split(p, Services("", p.Samples, "")))
		if len(errs) != 3 || errs[0] == nil || Retryable(errs[0]) || errs[1] != nil || errs[2] != nil {
			t.Errorf("errors %v, want only the first series refused", errs)
		}
	})
}
