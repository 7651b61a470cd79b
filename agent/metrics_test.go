package agent

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sprof/sprof/exporters/otlp"
	"github.com/sprof/sprof/internal/testenv"
)

// parsePrometheus parses text with the Prometheus project's own Python
// parser (Debian's python3-prometheus-client) and returns every sample as
// `name{labels}` → value.
func parsePrometheus(t *testing.T, text string) map[string]float64 {
	t.Helper()
	const python = "/usr/bin/python3"
	const script = `
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = {}
for fam in text_string_to_metric_families(sys.stdin.read()):
    for s in fam.samples:
        labels = ",".join('%s="%s"' % kv for kv in sorted(s.labels.items()))
        out[s.name + ("{" + labels + "}" if labels else "")] = s.value
json.dump(out, sys.stdout)
`
	if err := exec.Command(python, "-c", "import prometheus_client").Run(); err != nil {
		testenv.Unavailable(t, "python3-prometheus-client is not installed (make test installs it)")
	}
	cmd := exec.Command(python, "-c", script)
	cmd.Stdin = strings.NewReader(text)
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("Prometheus's parser rejects the metrics: %v\n%s", err, text)
	}
	var out map[string]float64
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMetricsEndpoint scrapes a running agent's endpoint and checks the
// numbers against what happened, for each destination.
func TestMetricsEndpoint(t *testing.T) {
	srv := newFakePyroscope(t)
	var otlpBytes atomic.Uint64
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		otlpBytes.Add(uint64(n))
	}))
	defer receiver.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(&fakeRecorder{}, Config{Interval: 50 * time.Millisecond, DrainEvery: 10 * time.Millisecond, ProcRoot: fakeProc(t),
		Pyroscope: pyroscopeConfig(srv.url()), OTLP: &otlp.Config{Endpoint: receiver.URL, Protocol: otlp.HTTP}, Metrics: l})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, a)
	waitFor(t, "two intervals delivered to each", 5*time.Second, func() bool {
		return a.deliveries[0].delivered.Load() >= 2 && a.deliveries[1].delivered.Load() >= 2
	})
	delivered := [2]uint64{a.deliveries[0].delivered.Load(), a.deliveries[1].delivered.Load()}
	resp, err := http.Get("http://" + l.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q", ct)
	}
	stop()
	m := parsePrometheus(t, string(body))
	intervals := m["sprof_agent_intervals_total"]
	want := map[string]float64{
		"sprof_agent_samples_total":                           intervals * (webCount + dbCount),
		"sprof_agent_lost_samples_total":                      intervals, // the fake loses one a cut
		"sprof_agent_skipped_intervals_total":                 0,
		"sprof_agent_symbolize_cache_hits_total":              7,
		"sprof_agent_symbolize_cache_misses_total":            2,
		"sprof_agent_symbolize_cache_bytes":                   1 << 20,
		`sprof_agent_gsym_binaries_total{result="converted"}`: 3,
		`sprof_agent_gsym_binaries_total{result="reused"}`:    5,
		`sprof_agent_gsym_binaries_total{result="failed"}`:    0,
	}
	for i, to := range []string{"pyroscope", "otlp"} {
		l := `to="` + to + `"`
		for r := range numDropReasons {
			want[`sprof_agent_dropped_profiles_total{reason="`+r.String()+`",`+l+`}`] = 0
		}
		want[`sprof_agent_pushes_total{result="failed",`+l+`}`] = 0
		want[`sprof_agent_queue_capacity_intervals{`+l+`}`] = DefaultQueue
		want[`sprof_agent_destination_intervals_total{result="spilled",`+l+`}`] = 0
		want[`sprof_agent_destination_intervals_total{result="dropped",`+l+`}`] = 0
		if got := m[`sprof_agent_destination_intervals_total{result="delivered",`+l+`}`]; got < float64(delivered[i]) || got > intervals {
			t.Errorf("%s: %v intervals delivered of %v; %d before the scrape", to, got, intervals, delivered[i])
		}
		// Two profiles an interval, web and db.
		if got := m[`sprof_agent_pushes_total{result="ok",`+l+`}`]; got < 2*float64(delivered[i]) {
			t.Errorf("%s: %v profiles sent, %d intervals delivered before the scrape", to, got, delivered[i])
		}
		if age := time.Since(time.Unix(int64(m[`sprof_agent_last_push_timestamp_seconds{`+l+`}`]), 0)); age > time.Minute {
			t.Errorf("%s: last push %v ago", to, age)
		}
	}
	for name, want := range want {
		if got, ok := m[name]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
		}
	}
	// The scrape came before the agent's last requests; the receivers
	// have read them all by now.
	if got, read := m[`sprof_agent_sent_bytes_total{to="pyroscope"}`], srv.bodySize.Load(); got <= 0 || got > float64(read) {
		t.Errorf("%v bytes sent to Pyroscope, which read %d in all", got, read)
	}
	if got, read := m[`sprof_agent_sent_bytes_total{to="otlp"}`], otlpBytes.Load(); got <= 0 || got > float64(read) {
		t.Errorf("%v bytes sent over OTLP, the receiver read %d in all", got, read)
	}
	if _, err := http.Get("http://" + l.Addr().String() + "/metrics"); err == nil {
		t.Error("the endpoint still answers after Run returned")
	}
}
