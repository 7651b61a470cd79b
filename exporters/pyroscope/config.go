package pyroscope

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"
	"unicode/utf8"

	"github.com/sprof/sprof/exporters"
)

// API selects how profiles reach the server.
type API string

const (
	// Push is the Connect API, push.v1.PusherService/Push.
	Push API = "push"
	// Ingest is the legacy HTTP API: POST /ingest?format=pprof with the
	// pprof as the whole body.
	Ingest API = "ingest"
)

// ParseAPI reads "push" or "ingest", as a flag gives it.
func ParseAPI(s string) (API, error) {
	switch API(s) {
	case Push, Ingest:
		return API(s), nil
	}
	return "", fmt.Errorf("unknown Pyroscope API %q; choices are: push, ingest", s)
}

// Config says where and how to send profiles.
type Config struct {
	// URL is the server's base URL, e.g. http://pyroscope:4040.
	URL string
	// API is Push (the default when empty) or Ingest.
	API API
	// ServiceName labels every profile. When empty each process gets its
	// own series named after its command (see Services), read from
	// ProcRoot/PID/comm when its main thread has no sample; ProcRoot ""
	// reads nothing.
	ServiceName string
	ProcRoot    string
	// ProcessRoot adds a root frame naming each sample's process, Alloy's
	// comm = "stackframe": with one ServiceName for a whole host it tells
	// programs apart without a series per process.
	ProcessRoot exporters.ProcessRoot
	// Host is the value of the host label; no label when empty.
	Host string
	// Labels are further series labels, e.g. env=prod.
	Labels map[string]string
	// BasicAuthUser and BasicAuthPassword, or BearerToken, authenticate
	// (Grafana Cloud, reverse proxies). Read them from a file or the
	// environment, never from the command line.
	BasicAuthUser, BasicAuthPassword string
	BearerToken                      string
	// TenantID is sent as X-Scope-OrgID to multi-tenant servers.
	TenantID string
	// HTTPClient sends the requests; nil means one with Timeout.
	HTTPClient *http.Client
	// Timeout bounds one request when HTTPClient is nil; 10 s if zero.
	Timeout time.Duration
	// Attempts is how often one request is tried in all; 3 if zero.
	Attempts int
	// Backoff is the first wait between attempts, doubled each time up to
	// 30 s; 500 ms if zero.
	Backoff time.Duration
	// Concurrency is how many requests Send has under way at once;
	// DefaultConcurrency if zero.
	Concurrency int
	// Limits are the server's limits; zero fields take DefaultLimits.
	Limits Limits
	// Pacer, when not nil, paces the requests instead of one of the
	// client's own made from Limits: clients that send to one tenant
	// share its rate limit, so they should share a Pacer.
	Pacer *Pacer
}

// DefaultConcurrency bounds the requests one Send has under way. Every
// profile goes in a request of its own, and the server answers each after
// its next segment flush (half a second), so the requests of an interval
// grow with its services: 200 take ⌈200/32⌉ flushes, 3.5 s.
const DefaultConcurrency = 32

// concurrency is Concurrency or its default.
func (c *Config) concurrency() int {
	if c.Concurrency > 0 {
		return c.Concurrency
	}
	return DefaultConcurrency
}

// Limits are the Pyroscope server limits a client must respect.
type Limits struct {
	// MaxSamples is the most samples one profile may have.
	MaxSamples int
	// MaxBytes is the largest uncompressed pprof accepted.
	MaxBytes int
	// MaxDepth is the deepest stack kept whole.
	MaxDepth int
	// MaxLabelNames is the most labels a series may have.
	MaxLabelNames int
	// MaxNameLength and MaxValueLength bound a label's name and value.
	MaxNameLength, MaxValueLength int
	// MaxAge is how old a profile may be and still be accepted.
	MaxAge time.Duration
	// IngestionRate (bytes per second) and IngestionBurst (bytes) are the
	// tenant's ingestion rate limit (-distributor.ingestion-rate-limit-mb,
	// -distributor.ingestion-burst-size-mb), which the server applies to
	// every profile, counting its uncompressed size and its labels'. The
	// client paces its requests to stay within them and keeps every
	// profile within IngestionBurst: a profile past the limit is refused
	// (ResourceExhausted, HTTP 429) and sent again later. A negative
	// IngestionRate turns pacing off, for a server whose limits are
	// raised out of reach.
	IngestionRate  float64
	IngestionBurst int
}

// DefaultLimits are Pyroscope's defaults (pkg/validation/limits.go).
func DefaultLimits() Limits {
	return Limits{MaxSamples: 16_000, MaxBytes: 4 << 20, MaxDepth: 1_000,
		MaxLabelNames: 30, MaxNameLength: 1_024, MaxValueLength: 2_048, MaxAge: time.Hour,
		IngestionRate: 4 << 20, IngestionBurst: 2 << 20}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	for _, f := range []struct{ v, def *int }{
		{&l.MaxSamples, &d.MaxSamples}, {&l.MaxBytes, &d.MaxBytes}, {&l.MaxDepth, &d.MaxDepth},
		{&l.MaxLabelNames, &d.MaxLabelNames}, {&l.MaxNameLength, &d.MaxNameLength},
		{&l.MaxValueLength, &d.MaxValueLength}, {&l.IngestionBurst, &d.IngestionBurst},
	} {
		if *f.v <= 0 {
			*f.v = *f.def
		}
	}
	if l.MaxAge <= 0 {
		l.MaxAge = d.MaxAge
	}
	if l.IngestionRate == 0 {
		l.IngestionRate = d.IngestionRate
	}
	return l
}

// Reserved label names: set by the client from the Config fields.
const (
	labelName    = "__name__"
	labelService = "service_name"
	labelHost    = "host"
	metricName   = "process_cpu"
	// labelContainer is the series label of Series.Container, named as
	// the pprof label (exporters.LabelContainer) and as Alloy names it.
	labelContainer = string(exporters.LabelContainer)
)

// check validates the configuration up front, so a bad label fails at
// start-up instead of on every push.
func (c *Config) check() error {
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("pyroscope URL %q: want http:// or https:// and a host", c.URL)
	}
	if _, err := ParseAPI(string(c.API)); err != nil {
		return err
	}
	if c.BearerToken != "" && (c.BasicAuthUser != "" || c.BasicAuthPassword != "") {
		return errors.New("pyroscope: basic auth and a bearer token are exclusive")
	}
	// __name__, service_name, maybe host and container_id, plus the
	// others.
	if n := 4 + len(c.Labels); n > c.Limits.MaxLabelNames {
		return fmt.Errorf("pyroscope: %d labels, the server accepts at most %d", n, c.Limits.MaxLabelNames)
	}
	for name, value := range c.Labels {
		switch {
		case name == labelService || name == labelHost:
			return fmt.Errorf("pyroscope label %q: set it with its own option", name)
		case name == labelContainer:
			return fmt.Errorf("pyroscope label %q: sprof sets it to the container each process runs in", name)
		case !validLabelName(name):
			return fmt.Errorf("pyroscope label %q: names are letters, digits, _ and ., not starting with a digit or __", name)
		case len(name) > c.Limits.MaxNameLength:
			return fmt.Errorf("pyroscope label %q: name longer than %d bytes", name, c.Limits.MaxNameLength)
		}
		if err := c.checkValue(name, value); err != nil {
			return err
		}
	}
	if err := c.checkValue(labelService, c.ServiceName); err != nil {
		return err
	}
	return c.checkValue(labelHost, c.Host)
}

func (c *Config) checkValue(name, value string) error {
	if len(value) > c.Limits.MaxValueLength || !utf8.ValidString(value) {
		return fmt.Errorf("pyroscope label %s=%q: want valid UTF-8 of at most %d bytes", name, value, c.Limits.MaxValueLength)
	}
	return nil
}

// validLabelName accepts what Pyroscope's validation does, Prometheus
// names plus dots, and refuses the __ prefix that pyroscope.write and the
// server reserve.
func validLabelName(s string) bool {
	if s == "" || (len(s) >= 2 && s[:2] == "__") {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_' || r == '.' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z'):
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
