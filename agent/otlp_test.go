package agent

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/profiles/v1development"
	"golang.org/x/time/rate"
	"google.golang.org/protobuf/proto"

	"github.com/sprof/sprof/exporters"
	"github.com/sprof/sprof/exporters/otlp"
	"github.com/sprof/sprof/exporters/pyroscope"
	"github.com/sprof/sprof/exporters/pyroscope/pyroscopetest"
)

// otlpReceiver is an OTLP/HTTP receiver that hands each request to
// record, holding mu.
func otlpReceiver(mu *sync.Mutex, record func(*collectorpb.ExportProfilesServiceRequest)) http.Handler {
	return otlpAnswering(mu, func(req *collectorpb.ExportProfilesServiceRequest) int {
		record(req)
		return http.StatusOK
	})
}

// otlpAnswering is an OTLP/HTTP receiver that answers each request with
// the status answer returns for it, holding mu.
func otlpAnswering(mu *sync.Mutex, answer func(*collectorpb.ExportProfilesServiceRequest) int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		zr, err := gzip.NewReader(r.Body)
		if err != nil || r.URL.Path != otlp.Path || r.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, fmt.Sprint("bad request: ", err), http.StatusBadRequest)
			return
		}
		raw, _ := io.ReadAll(zr)
		req := &collectorpb.ExportProfilesServiceRequest{}
		if err := proto.Unmarshal(raw, req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if code := answer(req); code != http.StatusOK {
			http.Error(w, http.StatusText(code), code)
		}
	})
}

// handlerTransport serves requests with a handler in memory, for tests in
// a synctest bubble.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, r)
	return rec.Result(), nil
}

// TestOTLPPaced: 200 services of 30 stacks of 20 frames, about 7 MB of
// profiles, go out in an export each, every service once, each export
// within Pyroscope's rate limit burst as the server charges it (the
// pprof it makes of each resource's profile), and no faster than the
// rate limit lets them through, so that the server refuses none.
func TestOTLPPaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := pyroscopetest.ServicesProfile(200, 30, 20)
		series := pyroscope.Split(p, pyroscope.Services("", p.Samples, ""))
		charge := map[string]int{}
		for _, s := range series {
			pp, err := exporters.BuildPprof(s.Profile, exporters.Options{Labels: []exporters.Label{}})
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			pp.WriteUncompressed(&buf)
			charge[s.Service] = buf.Len()
		}
		var mu sync.Mutex
		var charges []int
		samples := map[string]int64{}
		receiver := otlpReceiver(&mu, func(req *collectorpb.ExportProfilesServiceRequest) {
			charges = append(charges, 0)
			for _, rp := range req.ResourceProfiles {
				var name string
				for _, kv := range rp.Resource.Attributes {
					if kv.Key == "service.name" {
						name = kv.Value.GetStringValue()
					}
				}
				charges[len(charges)-1] += charge[name]
				for _, p := range rp.ScopeProfiles[0].Profiles {
					for _, s := range p.Samples {
						samples[name] += s.Values[0]
					}
				}
			}
		})
		c, err := otlp.New(otlp.Config{Endpoint: "http://receiver:4040", Protocol: otlp.HTTP,
			HTTPClient: &http.Client{Transport: handlerTransport{receiver}}})
		if err != nil {
			t.Fatal(err)
		}
		pace := pyroscope.NewPacer(pyroscope.Limits{})
		o := &otlpSender{client: c, host: "node-1", log: slog.New(slog.DiscardHandler), pace: pace}
		start := time.Now()
		for _, err := range o.send(context.Background(), series) {
			if err != nil {
				t.Fatal(err)
			}
		}
		took := time.Since(start)
		limits := pyroscope.DefaultLimits()
		total := 0
		for _, n := range charges {
			total += n
			if n > limits.IngestionBurst {
				t.Errorf("an export of %d bytes of pprof, over the server's burst of %d", n, limits.IngestionBurst)
			}
		}
		if len(samples) != 200 || samples["svc000"] != 465 || samples["svc199"] != 465 {
			t.Errorf("%d services arrived (svc000: %d, svc199: %d samples), want 200 of 465 each", len(samples), samples["svc000"], samples["svc199"])
		}
		least := time.Duration(float64(total-limits.IngestionBurst) / limits.IngestionRate * float64(time.Second))
		t.Logf("%d exports, %d bytes of pprof in all, took %v", len(charges), total, took)
		if len(charges) < 2 || took < least {
			t.Errorf("%d exports took %v, want several, no faster than the rate limit allows (%v)", len(charges), took, least)
		}
	})
}

// TestOTLPServerStarting: a Pyroscope server that has just started
// answers OTLP/HTTP exports with 500 and its storage's Unavailable status
// until its segment writers are ready; the agent sends those intervals
// again instead of dropping them, and all arrive, each once.
func TestOTLPServerStarting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		starting := true
		samples := map[int64]int64{} // by profile time
		receiver := otlpReceiver(&mu, func(req *collectorpb.ExportProfilesServiceRequest) {
			for _, rp := range req.ResourceProfiles {
				for _, p := range rp.ScopeProfiles[0].Profiles {
					for _, s := range p.Samples {
						samples[int64(p.TimeUnixNano)] += s.Values[0]
					}
				}
			}
		})
		pyroscopeLike := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			s := starting
			mu.Unlock()
			if s {
				// As Pyroscope's OTLP handler words it (pkg/ingester/otlp).
				http.Error(w, "failed to make a GRPC request: push series with index 0 and id 5f824cc9-0d9c-45fb-90e1-2e906b285c4f failed: "+
					"unknown: rpc error: code = Unavailable desc = service is unavailable", http.StatusInternalServerError)
				return
			}
			receiver.ServeHTTP(w, r)
		})
		rec := servicesRecorder(3)
		r := run(t, rec, Config{Interval: 5 * time.Second, ProcRoot: t.TempDir(), OTLP: &otlp.Config{Endpoint: "http://pyroscope:4040",
			Protocol: otlp.HTTP, HTTPClient: &http.Client{Transport: handlerTransport{pyroscopeLike}}}})
		t0 := time.Now()
		until(t0, 17*time.Second)
		mu.Lock()
		starting = false
		mu.Unlock()
		until(t0, 18*time.Second)
		r.sigterm(t)
		mu.Lock()
		defer mu.Unlock()
		cut := rec.intervals()
		for _, start := range cut {
			if n := samples[start.UnixNano()]; n != 9 {
				t.Errorf("interval of %v: %d samples arrived, want 9 (3 services of 3)", start, n)
			}
		}
		if d, s, x := stopLine(t, r.log.String(), "otlp"); d != fmt.Sprint(len(cut)) || s != "0" || x != "0" {
			t.Errorf("log says delivered=%s spilled=%s dropped=%s, want %d, 0, 0", d, s, x, len(cut))
		}
	})
}

// TestOTLPRateLimitedOnce: the tenant's rate limit is spent by others, so
// a Pyroscope-like receiver refuses some resources' profiles with HTTP 429
// and stores the rest of the export, as Pyroscope's OTLP handler does.
// What was refused is sent again until stored, and every service's
// profile of every interval is stored exactly once.
func TestOTLPRateLimitedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		bucket := rate.NewLimiter(2, 2) // two resources' profiles a second
		refused := 0
		stored := map[string]int{} // by profile time and service
		pyroscopeLike := otlpAnswering(&mu, func(req *collectorpb.ExportProfilesServiceRequest) int {
			status := http.StatusOK
			for _, rp := range req.ResourceProfiles {
				if !bucket.Allow() {
					refused++
					status = http.StatusTooManyRequests
					continue
				}
				for _, kv := range rp.Resource.Attributes {
					if kv.Key == "service.name" {
						stored[fmt.Sprint(rp.ScopeProfiles[0].Profiles[0].TimeUnixNano, kv.Value.GetStringValue())]++
					}
				}
			}
			return status
		})
		rec := servicesRecorder(6)
		r := run(t, rec, Config{Interval: 5 * time.Second, ProcRoot: t.TempDir(), OTLP: &otlp.Config{Endpoint: "http://pyroscope:4040",
			Protocol: otlp.HTTP, HTTPClient: &http.Client{Transport: handlerTransport{pyroscopeLike}}}})
		until(time.Now(), 21*time.Second)
		r.sigterm(t)
		mu.Lock()
		defer mu.Unlock()
		for _, start := range rec.intervals() {
			for i := range 6 {
				if k := fmt.Sprint(start.UnixNano(), fmt.Sprintf("svc%03d", i)); stored[k] != 1 {
					t.Errorf("interval of %v, svc%03d: stored %d times, want once", start, i, stored[k])
				}
			}
		}
		if refused == 0 {
			t.Error("nothing was refused: the test tests nothing")
		}
	})
}
