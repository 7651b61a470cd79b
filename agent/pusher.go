package agent

import (
	"cmp"
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/sprof/sprof/exporters/pyroscope"
)

// defaultPushTimeout bounds one request, as Grafana Alloy's remote_timeout.
const defaultPushTimeout = 10 * time.Second

// pusher sends series to Pyroscope, with one client for the agent's
// life: it paces all requests to the server's rate limit together.
type pusher struct {
	client *pyroscope.Client
	sent   atomic.Uint64
}

// newPusher checks cfg once, so a bad URL or label fails at start-up
// rather than on every push.
func newPusher(cfg pyroscope.Config) (*pusher, error) {
	p := &pusher{}
	var err error
	if p.client, err = pyroscope.New(pushConfig(cfg, &p.sent)); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *pusher) sentBytes() uint64 { return p.sent.Load() }

// pushConfig is cfg with an HTTP client that times requests out and
// counts the bytes it sends in sent.
func pushConfig(cfg pyroscope.Config, sent *atomic.Uint64) pyroscope.Config {
	// A request that never ends would stall every push after it.
	hc := http.Client{Timeout: cmp.Or(cfg.Timeout, defaultPushTimeout)}
	if cfg.HTTPClient != nil {
		hc = *cfg.HTTPClient
	}
	base := hc.Transport
	if base == nil {
		base = pyroscope.Transport(cfg)
	}
	hc.Transport = &countingTransport{base: base, sent: sent}
	cfg.HTTPClient = &hc
	return cfg
}

func (p *pusher) setCredentials(c Credentials) error {
	return p.client.SetCredentials(c.User, c.Password, c.Token)
}

func (p *pusher) send(ctx context.Context, series []pyroscope.Series) []error {
	return p.client.Send(ctx, series)
}

// countingTransport counts the request bytes it sends.
type countingTransport struct {
	base http.RoundTripper
	sent *atomic.Uint64
}

func (t *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil && r.Body != http.NoBody {
		r = r.Clone(r.Context())
		r.Body = &countingBody{r.Body, t.sent}
	}
	return t.base.RoundTrip(r)
}

type countingBody struct {
	io.ReadCloser
	sent *atomic.Uint64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.sent.Add(uint64(n))
	return n, err
}

// retryable says whether a failed push is worth trying again. The caller
// has checked that it did not cancel the push itself, so a push that
// connect reports as canceled met a reset connection (as it does when a
// server goes down mid-dial): transient.
func (p *pusher) retryable(err error) bool {
	return pyroscope.Retryable(err) || connect.CodeOf(err) == connect.CodeCanceled
}

// outcome classifies a failed delivery: worth retrying later, or to be
// dropped for the given reason.
func outcome(s sender, err error) (retry bool, reason dropReason) {
	switch {
	case errors.Is(err, pyroscope.ErrTooOld):
		return false, dropTooOld
	case s.retryable(err):
		return true, 0
	}
	return false, dropRejected
}
