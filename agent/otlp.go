package agent

import (
	"context"
	"errors"
	"log/slog"

	profilespb "go.opentelemetry.io/proto/otlp/profiles/v1development"
	"google.golang.org/protobuf/proto"

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

// otlpSender sends intervals to an OpenTelemetry profiles endpoint: all
// series of an interval in one export, one resource per series.
type otlpSender struct {
	client *otlp.Client
	host   string
	log    *slog.Logger
}

func (o *otlpSender) retryable(err error) bool { return otlp.Retryable(err) }

func (o *otlpSender) send(ctx context.Context, series []pyroscope.Series) []error {
	errs := make([]error, len(series))
	o.sendPart(ctx, series, errs)
	return errs
}

// sendPart exports series in one request, or in halves while the request
// would be larger than maxOTLPRequest, and records the outcome in errs.
func (o *otlpSender) sendPart(ctx context.Context, series []pyroscope.Series, errs []error) {
	data, err := o.build(series)
	if err == nil && len(series) > 1 && proto.Size(data) > maxOTLPRequest {
		half := len(series) / 2
		o.sendPart(ctx, series[:half], errs[:half])
		o.sendPart(ctx, series[half:], errs[half:])
		return
	}
	if err == nil {
		err = o.client.Export(ctx, data)
	}
	if pe := (*otlp.PartialError)(nil); errors.As(err, &pe) {
		// The rest was taken; sending again would not change the verdict.
		o.log.Warn("OTLP receiver rejected some profiles", "endpoint", o.client.Endpoint(), "rejected", pe.Rejected, "message", pe.Message)
		err = nil
	}
	for i := range errs {
		errs[i] = err
	}
}

// build makes one OTLP message of series, which are all of one interval.
func (o *otlpSender) build(series []pyroscope.Series) (*profilespb.ProfilesData, error) {
	p := *series[0].Profile
	p.Samples = nil
	service := map[*stacks.Sample]string{}
	for _, s := range series {
		p.Samples = append(p.Samples, s.Profile.Samples...)
		for _, smp := range s.Profile.Samples {
			service[smp] = s.Service
		}
	}
	return exporters.BuildOTLP(&p, exporters.Options{OTLP: exporters.OTLPOptions{
		HostName: o.host, Service: func(s *stacks.Sample) string { return service[s] }}})
}
