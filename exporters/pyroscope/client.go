package pyroscope

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/google/pprof/profile"
	pushv1 "github.com/grafana/pyroscope/api/gen/proto/go/push/v1"
	"github.com/grafana/pyroscope/api/gen/proto/go/push/v1/pushv1connect"
	typesv1 "github.com/grafana/pyroscope/api/gen/proto/go/types/v1"

	"github.com/sprof/sprof/exporters"
	"github.com/sprof/sprof/stacks"
)

// ErrTooOld reports a profile that started longer ago than the server
// accepts (an hour by default). Sending it would only earn a rejection, so
// callers should drop it rather than queue it again.
var ErrTooOld = errors.New("profile older than Pyroscope accepts")

// maxRequestBytes bounds the raw profiles of one Push request, far below
// the server's 256 MiB body limit.
const maxRequestBytes = 32 << 20

// Client pushes profiles to one Pyroscope server.
type Client struct {
	cfg    Config
	limits Limits
	http   *http.Client
	push   pushv1connect.PusherServiceClient
	// now is the clock the age limit is checked against.
	now func() time.Time
}

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
	hc := &http.Client{Timeout: cmp.Or(cfg.Timeout, 10*time.Second)}
	if cfg.HTTPClient != nil {
		c := *cfg.HTTPClient
		hc = &c
	}
	hc.Transport = &authTransport{base: cmp.Or[http.RoundTripper](hc.Transport, http.DefaultTransport), cfg: &cfg}
	return &Client{
		cfg:    cfg,
		limits: cfg.Limits,
		http:   hc,
		push:   pushv1connect.NewPusherServiceClient(hc, cfg.URL),
		now:    time.Now,
	}, nil
}

// Push sends p, split into its series (Split, with the services that
// Services names from the configured ServiceName and ProcRoot), each as
// as many pprof profiles as the server's limits need. It tries every
// series even when one fails and returns the errors joined; test them with
// Retryable.
func (c *Client) Push(ctx context.Context, p *stacks.Profile) error {
	var errs []error
	for _, s := range Split(p, Services(c.cfg.ServiceName, p.Samples, c.cfg.ProcRoot)) {
		if err := c.PushSeries(ctx, s); err != nil {
			if errors.Is(err, ErrTooOld) {
				return err // so is every other series
			}
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// PushSeries sends one series, split into as many pprof profiles as the
// server's limits need, for a caller that splits profiles itself (with
// Split) and queues the series.
func (c *Client) PushSeries(ctx context.Context, s Series) error {
	if p := s.Profile; !p.Start.IsZero() {
		if age := c.now().Sub(p.Start); age > c.limits.MaxAge {
			return fmt.Errorf("pyroscope: %w: started %s ago, the limit is %s", ErrTooOld, age.Round(time.Second), c.limits.MaxAge)
		}
	}
	raws, err := c.encode(s.Profile)
	if err == nil {
		if c.cfg.API == Ingest {
			err = c.ingestAll(ctx, s, raws)
		} else {
			err = c.pushAll(ctx, c.labels(s), raws)
		}
	}
	if err != nil {
		return fmt.Errorf("pyroscope: service %q: %w", s.Service, err)
	}
	return nil
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

// encode turns p into gzip-compressed pprof profiles that each stay within
// the sample and size limits. Per-sample labels are left out: Pyroscope
// would make a series of every distinct pid/tid.
func (c *Client) encode(p *stacks.Profile) ([][]byte, error) {
	pp, err := exporters.BuildPprof(p, exporters.Options{
		Labels: []exporters.Label{}, MaxDepth: c.limits.MaxDepth, ProcessRoot: c.cfg.ProcessRoot})
	if err != nil {
		return nil, err
	}
	if len(pp.Sample) == 0 {
		return nil, nil // nothing worth a request
	}
	return c.encodeWithin(pp, nil)
}

// encodeWithin appends pp to out, split into contiguous runs of samples
// as often as the limits need; each part is compacted so its tables hold
// only what its samples use, with dense IDs.
func (c *Client) encodeWithin(pp *profile.Profile, out [][]byte) ([][]byte, error) {
	var raw bytes.Buffer
	if err := pp.WriteUncompressed(&raw); err != nil {
		return nil, fmt.Errorf("encode pprof: %w", err)
	}
	if len(pp.Sample) <= c.limits.MaxSamples && raw.Len() <= c.limits.MaxBytes {
		return append(out, gzipBytes(raw.Bytes())), nil
	}
	if len(pp.Sample) < 2 {
		return nil, fmt.Errorf("one sample makes a %d-byte profile, over the limit of %d", raw.Len(), c.limits.MaxBytes)
	}
	parts := max(2, ceilDiv(len(pp.Sample), c.limits.MaxSamples), ceilDiv(raw.Len(), c.limits.MaxBytes))
	for i := range parts {
		lo, hi := i*len(pp.Sample)/parts, (i+1)*len(pp.Sample)/parts
		part := withSamples(pp, pp.Sample[lo:hi]).Compact()
		if err := exporters.CheckPprof(part); err != nil {
			return nil, fmt.Errorf("split profile: %w", err)
		}
		var err error
		if out, err = c.encodeWithin(part, out); err != nil {
			return nil, err
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

func gzipBytes(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b) // writes to a bytes.Buffer cannot fail
	zw.Close()
	return buf.Bytes()
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// pushAll sends raws under labels with as few Push requests as the
// request size bound allows.
func (c *Client) pushAll(ctx context.Context, labels []*typesv1.LabelPair, raws [][]byte) error {
	for len(raws) > 0 {
		n, size := 0, 0
		for n < len(raws) && (n == 0 || size+len(raws[n]) <= maxRequestBytes) {
			size += len(raws[n])
			n++
		}
		rs := &pushv1.RawProfileSeries{Labels: labels}
		for _, raw := range raws[:n] {
			rs.Samples = append(rs.Samples, &pushv1.RawSample{RawProfile: raw, ID: newUUID()})
		}
		req := &pushv1.PushRequest{Series: []*pushv1.RawProfileSeries{rs}}
		err := c.retry(ctx, func(ctx context.Context) error {
			_, err := c.push.Push(ctx, connect.NewRequest(req))
			return err
		})
		if err != nil {
			return fmt.Errorf("push: %w", err)
		}
		raws = raws[n:]
	}
	return nil
}

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
// pyroscope.write retries them), HTTP 408, 429 and 5xx from /ingest, and
// network errors. Invalid profiles, bad credentials and ErrTooOld are not.
func Retryable(err error) bool {
	var se *StatusError
	if errors.As(err, &se) {
		return se.Code == http.StatusRequestTimeout || se.Code == http.StatusTooManyRequests || se.Code >= 500
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

// newUUID returns a random (version 4) UUID, the ID Pyroscope wants for
// each raw profile.
func newUUID() string {
	var b [16]byte
	rand.Read(b[:]) // never fails, per crypto/rand
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// authTransport adds credentials and the tenant to every request.
type authTransport struct {
	base http.RoundTripper
	cfg  *Config
}

func (t *authTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if t.cfg.BasicAuthUser == "" && t.cfg.BasicAuthPassword == "" && t.cfg.BearerToken == "" && t.cfg.TenantID == "" {
		return t.base.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	switch {
	case t.cfg.BearerToken != "":
		r.Header.Set("Authorization", "Bearer "+t.cfg.BearerToken)
	case t.cfg.BasicAuthUser != "" || t.cfg.BasicAuthPassword != "":
		r.SetBasicAuth(t.cfg.BasicAuthUser, t.cfg.BasicAuthPassword)
	}
	if t.cfg.TenantID != "" {
		r.Header.Set("X-Scope-OrgID", t.cfg.TenantID)
	}
	return t.base.RoundTrip(r)
}
