package pyroscope

import (
	"context"
	"errors"
	"fmt"
	"math"

	"golang.org/x/time/rate"
)

// paceShare is the share of the server's ingestion rate limit a Pacer
// uses: the server counts a profile's size as it re-encodes it, which may
// differ a little from the bytes sent.
const paceShare = 7.0 / 8

// Pacer holds requests back to a Pyroscope tenant's ingestion rate limit
// (Limits.IngestionRate and IngestionBurst), for every client of one
// server: the Push and /ingest client, and an OTLP exporter to Pyroscope,
// whose profiles the server charges the same way. A request's cost is
// what the server charges for its profiles: each one's uncompressed size
// plus its labels' names and values.
type Pacer struct {
	limiter *rate.Limiter // nil: no limit
	budget  int
}

// NewPacer returns a Pacer for the limits, whose zero fields take
// DefaultLimits; a negative IngestionRate paces nothing.
func NewPacer(l Limits) *Pacer {
	l = l.withDefaults()
	if l.IngestionRate < 0 {
		return &Pacer{budget: math.MaxInt}
	}
	budget := int(float64(l.IngestionBurst) * paceShare)
	return &Pacer{limiter: rate.NewLimiter(rate.Limit(l.IngestionRate*paceShare), budget), budget: budget}
}

// Budget is the most one request may cost: a request that costs more
// than the burst could never pass.
func (p *Pacer) Budget() int { return p.budget }

// Wait blocks until a request of the given cost, at most Budget, may be
// sent. It fails when ctx ends first or its deadline is too close for
// the wait: a failure worth trying again later (its error is a
// context.DeadlineExceeded).
func (p *Pacer) Wait(ctx context.Context, cost int) error {
	if p.limiter == nil {
		return nil
	}
	if err := p.limiter.WaitN(ctx, min(cost, p.budget)); err != nil {
		return fmt.Errorf("pacing %d bytes to the server's ingestion rate limit: %w", cost, errors.Join(err, context.DeadlineExceeded))
	}
	return nil
}
