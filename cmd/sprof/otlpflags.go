package main

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/spf13/pflag"

	"github.com/sprof/sprof/exporters/otlp"
)

// OpenTelemetry's environment variables for OTLP headers: the profiles
// signal's own first, then the one for every signal. Their values are
// comma-separated key=value pairs with percent-encoded values (W3C
// Baggage's syntax).
const (
	envOTLPProfilesHeaders = "OTEL_EXPORTER_OTLP_PROFILES_HEADERS"
	envOTLPHeaders         = "OTEL_EXPORTER_OTLP_HEADERS"
)

// otlpFlags are the agent's OTLP destination flags.
type otlpFlags struct {
	endpoint, protocol, caFile string
	headers                    []string
}

func (f *otlpFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.endpoint, "otlp-endpoint", "", "also send profiles to this OpenTelemetry profiles endpoint (Collector, Pyroscope), e.g. http://collector:4317; https:// for TLS")
	fs.StringVar(&f.protocol, "otlp-protocol", string(otlp.GRPC), "grpc, or http/protobuf (POST /v1development/profiles)")
	fs.StringArrayVar(&f.headers, "otlp-header", nil, "header k=v for every OTLP request, e.g. X-Scope-OrgID=team-a (repeatable); secrets go in "+envOTLPProfilesHeaders+" or "+envOTLPHeaders)
	fs.StringVar(&f.caFile, "otlp-ca-file", "", "PEM certificates to trust for an https:// OTLP endpoint instead of the system's")
}

// config returns the OTLP configuration, nil without --otlp-endpoint.
func (f *otlpFlags) config(getenv func(string) string) (*otlp.Config, error) {
	if f.endpoint == "" {
		if len(f.headers) > 0 || f.caFile != "" {
			return nil, usagef("--otlp-header and --otlp-ca-file are for OTLP; give --otlp-endpoint too")
		}
		return nil, nil
	}
	cfg := &otlp.Config{Endpoint: f.endpoint, CAFile: f.caFile, Headers: map[string]string{}}
	var err error
	if cfg.Protocol, err = otlp.ParseProtocol(f.protocol); err != nil {
		return nil, usagef("--otlp-protocol: %v", err)
	}
	env := getenv(envOTLPProfilesHeaders)
	name := envOTLPProfilesHeaders
	if env == "" {
		env, name = getenv(envOTLPHeaders), envOTLPHeaders
	}
	if env != "" {
		for _, kv := range strings.Split(env, ",") {
			k, v, ok := strings.Cut(kv, "=")
			k = strings.TrimSpace(k)
			if v, err = url.PathUnescape(strings.TrimSpace(v)); !ok || k == "" || err != nil {
				// Never echo the value: it is most likely a secret.
				return nil, fmt.Errorf("%s: an entry is not key=value with a percent-encoded value", name)
			}
			cfg.Headers[k] = v
		}
	}
	for _, kv := range f.headers {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usagef("--otlp-header %q: want name=value", kv)
		}
		if strings.EqualFold(k, "authorization") {
			return nil, usagef("--otlp-header %s: secrets on the command line are visible to every user in ps; use %s", k, envOTLPProfilesHeaders)
		}
		cfg.Headers[k] = v
	}
	// The client checks the endpoint, the headers and the CA file.
	if _, err := otlp.New(*cfg); err != nil {
		return nil, &usageError{err.Error()}
	}
	return cfg, nil
}
