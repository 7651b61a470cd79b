package agent

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"sync"

	profilespb "go.opentelemetry.io/proto/otlp/profiles/v1development"

	"github.com/sprof/sprof/exporters"
	"github.com/sprof/sprof/exporters/otlp"
	"github.com/sprof/sprof/exporters/pyroscope"
	"github.com/sprof/sprof/stacks"
)

// maxOTLPRequest bounds one OTLP export: far below the 100 MiB a
// Pyroscope server's gRPC receives (-server.grpc-max-recv-msg-size-bytes)
// and the 256 MB of its body limit, and below what a Collector takes by
// default.
const maxOTLPRequest = 16 << 20

// otlpSender sends intervals to an OpenTelemetry profiles endpoint: each
// series of an interval in an export of its own (send), one resource
// each, many exports at a time. The samples carry
// no process or thread attributes: Pyroscope would make a series of each
// thread (exporters.OTLPOptions.NoSampleAttributes).
//
// Pyroscope, the receiver most OTLP profiles go to (directly or through
// a Collector), charges each profile against the tenant's ingestion rate
// limit as it does a Push, refuses what finds too few tokens and keeps
// the rest of the export; so the exports are paced as Pyroscope's client
// paces its requests (pyroscope.Pacer, the server's default limits),
// which costs nothing against a receiver without such a limit.
type otlpSender struct {
	client *otlp.Client
	host   string
	log    *slog.Logger
	pace   *pyroscope.Pacer
}

// retryable is otlp.Retryable, and also says yes to an answer in which
// Pyroscope says its storage was unavailable: it answers so with HTTP 500
// while it starts, a code the OTLP specification says not to retry.
func (o *otlpSender) retryable(err error) bool {
	return otlp.Retryable(err) || pyroscope.BackendUnavailable(err.Error())
}

func (o *otlpSender) sentBytes() uint64 { return o.client.SentBytes() }

// send exports every part of every series (fit) in a request of its own,
// otlp.MaxExports at a time, as pyroscope.Client.Send sends profiles:
// Pyroscope, which files each resource's profile as a series, refuses
// some of an export's profiles (its rate limit, its storage not ready)
// and keeps the others, answering with the error alone, so an export of
// several sent again would store the kept ones twice.
func (o *otlpSender) send(ctx context.Context, series []pyroscope.Series) []error {
	errs := make([]error, len(series))
	limit := min(o.pace.Budget(), maxOTLPRequest)
	var parts []otlpPart
	for i, s := range series {
		parts = o.fit(parts, i, s, limit, errs)
	}
	failed := make([]error, len(parts))
	sem := make(chan struct{}, otlp.MaxExports)
	var wg sync.WaitGroup
	for i, p := range parts {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			failed[i] = o.export(ctx, p)
		})
	}
	wg.Wait()
	for i, p := range parts {
		if failed[i] != nil && errs[p.series] == nil { // the first error of a series' parts
			errs[p.series] = failed[i]
		}
	}
	return errs
}

// otlpPart is a series, or part of one too large to go alone, and its
// cost.
type otlpPart struct {
	series int // index into send's series
	s      pyroscope.Series
	cost   int
}

// fit appends series i, s, to parts, split into halves of its samples
// while a part costs more than limit; a series that cannot be built gets
// its error in errs.
//
// A part's cost is what Pyroscope charges for it: the pprof it makes of
// the resource's profile, whose samples carry no labels (the series
// labels add a few hundred bytes, within the pacing's margin).
// The export itself is no measure: its one dictionary for all resources
// makes it smaller than the pprofs, or larger, with longer indexes.
func (o *otlpSender) fit(parts []otlpPart, i int, s pyroscope.Series, limit int, errs []error) []otlpPart {
	pp, err := exporters.BuildPprof(s.Profile, exporters.Options{Labels: []exporters.Label{}})
	var raw bytes.Buffer
	if err == nil {
		err = pp.WriteUncompressed(&raw)
	}
	if err != nil {
		errs[i] = err
		return parts
	}
	cost := raw.Len()
	if samples := s.Profile.Samples; cost > limit && len(samples) > 1 {
		for _, half := range [][]*stacks.Sample{samples[:len(samples)/2], samples[len(samples)/2:]} {
			p := *s.Profile
			p.Samples = half
			h := s
			h.Profile = &p
			parts = o.fit(parts, i, h, limit, errs)
		}
		return parts
	}
	return append(parts, otlpPart{series: i, s: s, cost: cost})
}

// export sends p in one request, once the pacing lets its cost through.
func (o *otlpSender) export(ctx context.Context, p otlpPart) error {
	data, err := o.build(p.s)
	if err == nil {
		err = o.pace.Wait(ctx, p.cost)
	}
	if err == nil {
		err = o.client.Export(ctx, data)
	}
	if pe := (*otlp.PartialError)(nil); errors.As(err, &pe) {
		// The rest was taken; sending again would not change the verdict.
		o.log.Warn("OTLP receiver rejected some profiles", "endpoint", o.client.Endpoint(), "rejected", pe.Rejected, "message", pe.Message)
		err = nil
	}
	return err
}

// build makes the OTLP message of s: one resource, its service's.
func (o *otlpSender) build(s pyroscope.Series) (*profilespb.ProfilesData, error) {
	return exporters.BuildOTLP(s.Profile, exporters.Options{OTLP: exporters.OTLPOptions{
		HostName: o.host, Service: func(*stacks.Sample) string { return s.Service }, NoSampleAttributes: true}})
}
