package pyroscope

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/google/pprof/profile"
	pushv1 "github.com/grafana/pyroscope/api/gen/proto/go/push/v1"
	"github.com/grafana/pyroscope/api/gen/proto/go/push/v1/pushv1connect"
	typesv1 "github.com/grafana/pyroscope/api/gen/proto/go/types/v1"

	"github.com/sprof/sprof/exporters"
	"github.com/sprof/sprof/internal/gz"
	"github.com/sprof/sprof/stacks"
)

// ErrTooOld reports a profile that started longer ago than the server
// accepts (an hour by default). Sending it would only earn a rejection, so
// callers should drop it rather than queue it again.
var ErrTooOld = errors.New("profile older than Pyroscope accepts")

// Client pushes profiles to one Pyroscope server. It is safe for
// concurrent use; keep one per server, as it paces all its requests
// together.
type Client struct {
	cfg    Config
	limits Limits
	http   *http.Client
	push   pushv1connect.PusherServiceClient
	auth   atomic.Pointer[credentials]
	// pace holds requests back to the server's ingestion rate limit.
	pace *Pacer
	// now is the clock the age limit is checked against.
	now func() time.Time
	gz  gz.Compressor
}

// credentials authenticate the requests.
type credentials struct{ user, password, token string }

// New checks cfg and returns a client for it.
func New(cfg Config) (*Client, error) {
	if cfg.API == "" {
		cfg.API = Push
	}
	cfg.URL = strings.TrimRight(cfg.URL, "/")
	cfg.Limits = cfg.Limits.withDefaults()
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.Attempts <= 0 {
		cfg.Attempts = 3
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = 500 * time.Millisecond
	}
	cfg.Concurrency = cfg.concurrency()
	hc := &http.Client{Timeout: cmp.Or(cfg.Timeout, 10*time.Second), Transport: Transport(cfg)}
	if cfg.HTTPClient != nil {
		c := *cfg.HTTPClient
		hc = &c
	}
	c := &Client{cfg: cfg, limits: cfg.Limits, http: hc, now: time.Now, pace: cfg.Pacer}
	if c.pace == nil {
		c.pace = NewPacer(cfg.Limits)
	}
	c.auth.Store(&credentials{cfg.BasicAuthUser, cfg.BasicAuthPassword, cfg.BearerToken})
	hc.Transport = &authTransport{base: cmp.Or[http.RoundTripper](hc.Transport, http.DefaultTransport), c: c}
	c.push = pushv1connect.NewPusherServiceClient(hc, cfg.URL)
	return c, nil
}

// Transport is the HTTP transport of a client of cfg whose HTTPClient is
// nil: http.DefaultTransport's, keeping as many idle connections to the
// server as Send has requests under way. With the default two, an
// interval of more requests (/ingest sends one per profile) would open
// new connections, TLS handshakes and all, every round.
func Transport(cfg Config) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = cfg.concurrency()
	return t
}

// SetCredentials replaces the credentials the requests carry from now
// on (basic auth, or a bearer token), for a secret rotated while the
// client runs.
func (c *Client) SetCredentials(user, password, token string) error {
	if token != "" && (user != "" || password != "") {
		return errors.New("pyroscope: basic auth and a bearer token are exclusive")
	}
	c.auth.Store(&credentials{user, password, token})
	return nil
}

// Push sends p, split into its series (Split, with the services that
// Services names from the configured ServiceName and ProcRoot), with
// Send. It returns the errors of the series that were not delivered,
// joined; test them with Retryable.
func (c *Client) Push(ctx context.Context, p *stacks.Profile) error {
	return errors.Join(c.Send(ctx, Split(p, Services(c.cfg.ServiceName, p.Samples, c.cfg.ProcRoot)))...)
}

// Send delivers series, for a caller that splits profiles itself (with
// Split) and queues the series: each series becomes as many pprof
// profiles as the server's limits need, and each profile travels in a
// request of its own, at most Concurrency at a time. A Pyroscope server
// answers a request only after its next segment flush (about half a
// second), which the requests under way together share, so delivery time
// grows with the number of services only by a flush per Concurrency of
// them.
//
// One profile a request is what makes a failure safe to send again: a
// server that refuses some profiles of a Push request (its rate limit,
// its storage not ready) stores the others and answers with the error
// alone, naming neither, so a request of several profiles sent again
// would store the kept ones twice. (Grafana Alloy sends one series per
// request too; /ingest takes only one.)
//
// The result has one entry per series: nil when the server took all of
// it, else why not.
func (c *Client) Send(ctx context.Context, series []Series) []error {
	errs := make([]error, len(series))
	var parts []part
	for i, s := range series {
		n := len(parts)
		var err error
		if parts, err = c.encodeSeries(parts, i, s); err != nil {
			errs[i] = fmt.Errorf("pyroscope: service %q: %w", s.Service, err)
			parts = parts[:n]
		}
	}
	failed := make([]error, len(parts))
	sem := make(chan struct{}, c.cfg.Concurrency)
	var wg sync.WaitGroup
	for i, p := range parts {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			failed[i] = c.retry(ctx, func(ctx context.Context) error {
				if err := c.pace.Wait(ctx, p.cost); err != nil {
					return err
				}
				return c.sendPart(ctx, series[p.series], p)
			})
		})
	}
	wg.Wait()
	for i, p := range parts {
		if failed[i] != nil && errs[p.series] == nil { // one error per series is enough
			errs[p.series] = fmt.Errorf("pyroscope: service %q: %s: %w", series[p.series].Service, c.cfg.API, failed[i])
		}
	}
	return errs
}

// sendPart sends p, a profile of s, in one request of the configured
// API. A retry sends the same profile ID, so that a server could tell it
// is the same profile.
func (c *Client) sendPart(ctx context.Context, s Series, p part) error {
	if c.cfg.API == Ingest {
		return c.ingest(ctx, s, p)
	}
	req := &pushv1.PushRequest{Series: []*pushv1.RawProfileSeries{{Labels: c.labels(s),
		Samples: []*pushv1.RawSample{{RawProfile: p.gz, ID: p.id}}}}}
	_, err := c.push.Push(ctx, connect.NewRequest(req))
	return err
}

// part is one encoded profile of a series: gzip-compressed pprof, its
// uncompressed size, and its cost against the ingestion rate limit (the
// size and the series' labels, as the server counts it).
type part struct {
	series int
	gz     []byte
	size   int
	cost   int
	id     string // the profile's UUID (Push)
}

// encodeSeries checks the age of series i, s, and appends its parts to
// out.
func (c *Client) encodeSeries(out []part, i int, s Series) ([]part, error) {
	if p := s.Profile; !p.Start.IsZero() {
		if age := c.now().Sub(p.Start); age > c.limits.MaxAge {
			return out, fmt.Errorf("%w: started %s ago, the limit is %s", ErrTooOld, age.Round(time.Second), c.limits.MaxAge)
		}
	}
	labels := labelsSize(c.labels(s))
	maxBytes := c.limits.MaxBytes
	if b := c.pace.Budget() - labels; b < maxBytes {
		maxBytes = b
	}
	n := len(out)
	out, err := c.encode(out, i, s.Profile, maxBytes)
	for k := n; k < len(out); k++ {
		out[k].cost = out[k].size + labels
	}
	return out, err
}

// labelsSize is what the labels add to a profile's cost: their names and
// values, as the server counts them.
func labelsSize(ls []*typesv1.LabelPair) int {
	n := 0
	for _, l := range ls {
		n += len(l.Name) + len(l.Value)
	}
	return n
}

// labels returns the series labels of s, sorted by name.
func (c *Client) labels(s Series) []*typesv1.LabelPair {
	ls := []*typesv1.LabelPair{{Name: labelName, Value: metricName}, {Name: labelService, Value: s.Service}}
	if s.Container != "" {
		ls = append(ls, &typesv1.LabelPair{Name: labelContainer, Value: s.Container})
	}
	if c.cfg.Host != "" {
		ls = append(ls, &typesv1.LabelPair{Name: labelHost, Value: c.cfg.Host})
	}
	for k, v := range c.cfg.Labels {
		ls = append(ls, &typesv1.LabelPair{Name: k, Value: v})
	}
	slices.SortFunc(ls, func(a, b *typesv1.LabelPair) int { return strings.Compare(a.Name, b.Name) })
	return ls
}

// encode appends p, series i, to out as gzip-compressed pprof profiles
// that each stay within the sample limit and maxBytes. Per-sample labels
// are left out: Pyroscope would make a series of every distinct pid/tid.
func (c *Client) encode(out []part, i int, p *stacks.Profile, maxBytes int) ([]part, error) {
	pp, err := exporters.BuildPprof(p, exporters.Options{
		Labels: []exporters.Label{}, MaxDepth: c.limits.MaxDepth, ProcessRoot: c.cfg.ProcessRoot})
	if err != nil {
		return out, err
	}
	if len(pp.Sample) == 0 {
		return out, nil // nothing worth a request
	}
	return c.encodeWithin(pp, i, out, maxBytes)
}

// encodeWithin appends pp to out, split into contiguous runs of samples
// as often as the limits need; each part is compacted so its tables hold
// only what its samples use, with dense IDs.
func (c *Client) encodeWithin(pp *profile.Profile, i int, out []part, maxBytes int) ([]part, error) {
	var raw bytes.Buffer
	if err := pp.WriteUncompressed(&raw); err != nil {
		return out, fmt.Errorf("encode pprof: %w", err)
	}
	if len(pp.Sample) <= c.limits.MaxSamples && raw.Len() <= maxBytes {
		return append(out, part{series: i, gz: c.gz.Bytes(raw.Bytes()), size: raw.Len(), id: newUUID()}), nil
	}
	if len(pp.Sample) < 2 {
		return out, fmt.Errorf("one sample makes a %d-byte profile, over the limit of %d", raw.Len(), maxBytes)
	}
	parts := max(2, ceilDiv(len(pp.Sample), c.limits.MaxSamples), ceilDiv(raw.Len(), maxBytes))
	for k := range parts {
		lo, hi := k*len(pp.Sample)/parts, (k+1)*len(pp.Sample)/parts
		sub := withSamples(pp, pp.Sample[lo:hi]).Compact()
		if err := exporters.CheckPprof(sub); err != nil {
			return out, fmt.Errorf("split profile: %w", err)
		}
		var err error
		if out, err = c.encodeWithin(sub, i, out, maxBytes); err != nil {
			return out, err
		}
	}
	return out, nil
}

// withSamples is pp with only the given samples (and all of its tables).
func withSamples(pp *profile.Profile, samples []*profile.Sample) *profile.Profile {
	return &profile.Profile{
		SampleType: pp.SampleType, DefaultSampleType: pp.DefaultSampleType, Sample: samples,
		Mapping: pp.Mapping, Location: pp.Location, Function: pp.Function, Comments: pp.Comments,
		DropFrames: pp.DropFrames, KeepFrames: pp.KeepFrames, TimeNanos: pp.TimeNanos,
		DurationNanos: pp.DurationNanos, PeriodType: pp.PeriodType, Period: pp.Period, DocURL: pp.DocURL,
	}
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// retry calls call until it succeeds, fails for good, or the attempts run
// out, waiting Backoff, then twice that, up to 30 s, between attempts.
func (c *Client) retry(ctx context.Context, call func(context.Context) error) error {
	wait := c.cfg.Backoff
	for attempt := 1; ; attempt++ {
		err := call(ctx)
		if err == nil || !Retryable(err) {
			return err
		}
		if attempt >= c.cfg.Attempts {
			return fmt.Errorf("%d attempts: %w", attempt, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, 30*time.Second)
	}
}

// Retryable reports whether err is a failure worth trying again: the
// Connect codes a server uses for transient trouble (as Grafana Alloy's
// pyroscope.write retries them), HTTP 408, 429 and 5xx from /ingest, an
// answer that says the server's storage was unavailable
// (BackendUnavailable), and network errors. Invalid profiles, bad
// credentials and ErrTooOld are not.
func Retryable(err error) bool {
	var se *StatusError
	if errors.As(err, &se) {
		return se.Code == http.StatusRequestTimeout || se.Code == http.StatusTooManyRequests || se.Code >= 500 ||
			BackendUnavailable(se.Body)
	}
	if errors.Is(err, ErrTooOld) {
		return false
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		switch ce.Code() {
		case connect.CodeUnknown, connect.CodeInternal, connect.CodeUnavailable, connect.CodeDataLoss,
			connect.CodeAborted, connect.CodeResourceExhausted, connect.CodeDeadlineExceeded:
			return true
		}
		return false
	}
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne)
}

// backendUnavailable matches the gRPC status of a Pyroscope server's
// storage (its segment writers) that could not take a profile for a
// while, as the server quotes it in its error answers.
var backendUnavailable = regexp.MustCompile(`rpc error: code = (Unavailable|DeadlineExceeded|Aborted|ResourceExhausted) desc = `)

// BackendUnavailable reports whether a Pyroscope server's error message
// says its storage could not take the profiles for now, which sending
// them again later mends. A server that has just started listens before
// its segment writers are ready, and each API then answers with their
// gRPC status (Unavailable) quoted in a code it otherwise uses for what
// is refused for good: /ingest HTTP 422, OTLP/HTTP 500; Push says
// Connect "unknown", which Retryable retries anyway.
func BackendUnavailable(message string) bool {
	return backendUnavailable.MatchString(message)
}

// newUUID returns a random (version 4) UUID, the ID Pyroscope wants for
// each raw profile.
func newUUID() string {
	var b [16]byte
	rand.Read(b[:]) // never fails, per crypto/rand
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// authTransport adds the client's current credentials and the tenant to
// every request.
type authTransport struct {
	base http.RoundTripper
	c    *Client
}

func (t *authTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	cr, tenant := t.c.auth.Load(), t.c.cfg.TenantID
	if *cr == (credentials{}) && tenant == "" {
		return t.base.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	switch {
	case cr.token != "":
		r.Header.Set("Authorization", "Bearer "+cr.token)
	case cr.user != "" || cr.password != "":
		r.SetBasicAuth(cr.user, cr.password)
	}
	if tenant != "" {
		r.Header.Set("X-Scope-OrgID", tenant)
	}
	return t.base.RoundTrip(r)
}
