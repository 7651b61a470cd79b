// Package otlp sends sprof profiles to an OpenTelemetry profiles endpoint
// — an OpenTelemetry Collector, Grafana Pyroscope, or any backend of the
// profiles signal — with the official protobuf bindings
// (go.opentelemetry.io/proto/otlp, profiles/v1development v0.3.0, the
// version Pyroscope's server is built with), over gRPC
// (ProfilesService/Export) or HTTP (POST /v1development/profiles,
// application/x-protobuf, gzip-compressed). gRPC requests go
// uncompressed: a server need not have gzip installed for gRPC.
//
// The profiles are built by exporters.BuildOTLP: one resource per
// service, every frame symbolized on the host.
package otlp

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/profiles/v1development"
	profilespb "go.opentelemetry.io/proto/otlp/profiles/v1development"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sprof/sprof/internal/gz"
)

// Protocol is the OTLP transport, as OTEL_EXPORTER_OTLP_PROTOCOL names
// it.
type Protocol string

const (
	// GRPC is OTLP/gRPC, the OpenTelemetry default.
	GRPC Protocol = "grpc"
	// HTTP is OTLP/HTTP with protobuf bodies.
	HTTP Protocol = "http/protobuf"
)

// ParseProtocol reads "grpc" or "http/protobuf" ("http" for short).
func ParseProtocol(s string) (Protocol, error) {
	switch s {
	case string(GRPC):
		return GRPC, nil
	case string(HTTP), "http":
		return HTTP, nil
	}
	return "", fmt.Errorf("unknown OTLP protocol %q; choices are: grpc, http/protobuf", s)
}

// Path is where OTLP/HTTP profiles go, appended to an endpoint without a
// path of its own.
const Path = "/v1development/profiles"

// MaxExports is how many exports a Client is meant to have under way at
// once: its HTTP transport keeps as many idle connections, so that every
// round of them reuses the last one's. (gRPC multiplexes them on one.)
const MaxExports = 32

// Config says where and how to send profiles.
type Config struct {
	// Endpoint is the receiver's URL: http://host:port for plain text,
	// https://host:port for TLS. Over HTTP a URL with a path is used as
	// it is, one without gets Path.
	Endpoint string
	// Protocol is GRPC (the default when empty) or HTTP.
	Protocol Protocol
	// Headers go with every request (gRPC metadata or HTTP headers):
	// authorization, X-Scope-OrgID for a multi-tenant Pyroscope.
	Headers map[string]string
	// CAFile names PEM certificates to trust for https instead of the
	// system's.
	CAFile string
	// Timeout bounds one export; 10 s if zero.
	Timeout time.Duration
	// HTTPClient, for HTTP, sends the requests; nil means one with the
	// TLS settings above.
	HTTPClient *http.Client
	// DialOptions, for gRPC, come after the client's own (tests dial
	// in-memory connections with them).
	DialOptions []grpc.DialOption
}

// Client sends profiles to one endpoint. Make one with New; Close it.
type Client struct {
	cfg  Config
	url  string // HTTP
	http *http.Client
	conn *grpc.ClientConn // gRPC
	grpc collectorpb.ProfilesServiceClient
	sent atomic.Uint64
	gz   gz.Compressor
}

// New checks cfg and returns a client for it. A gRPC client connects
// lazily, at the first export.
func New(cfg Config) (*Client, error) {
	cfg.Protocol = cmp.Or(cfg.Protocol, GRPC)
	cfg.Timeout = cmp.Or(cfg.Timeout, 10*time.Second)
	u, err := url.Parse(cfg.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("OTLP endpoint %q: want http:// or https:// and a host", cfg.Endpoint)
	}
	for k, v := range cfg.Headers {
		if k == "" || strings.ContainsAny(k, " :\r\n") || strings.ContainsAny(v, "\r\n") {
			return nil, fmt.Errorf("OTLP header %q: not a valid header", k)
		}
	}
	var tlsCfg *tls.Config
	if u.Scheme == "https" {
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12}
		if cfg.CAFile != "" {
			pem, err := os.ReadFile(cfg.CAFile)
			if err != nil {
				return nil, fmt.Errorf("OTLP CA file: %w", err)
			}
			tlsCfg.RootCAs = x509.NewCertPool()
			if !tlsCfg.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("OTLP CA file %s: no PEM certificate in it", cfg.CAFile)
			}
		}
	} else if cfg.CAFile != "" {
		return nil, fmt.Errorf("OTLP CA file given for %s: use https://", cfg.Endpoint)
	}
	c := &Client{cfg: cfg}
	switch cfg.Protocol {
	case GRPC:
		creds := insecure.NewCredentials()
		if tlsCfg != nil {
			creds = credentials.NewTLS(tlsCfg)
		}
		host := u.Host
		if u.Port() == "" {
			host += map[string]string{"http": ":80", "https": ":443"}[u.Scheme]
		}
		opts := append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, cfg.DialOptions...)
		if c.conn, err = grpc.NewClient("passthrough:///"+host, opts...); err != nil {
			return nil, fmt.Errorf("OTLP endpoint %s: %w", cfg.Endpoint, err)
		}
		c.grpc = collectorpb.NewProfilesServiceClient(c.conn)
	case HTTP:
		c.url = cfg.Endpoint
		if u.Path == "" || u.Path == "/" {
			c.url = strings.TrimRight(cfg.Endpoint, "/") + Path
		}
		c.http = cfg.HTTPClient
		if c.http == nil {
			t := http.DefaultTransport.(*http.Transport).Clone()
			t.TLSClientConfig = tlsCfg
			t.MaxIdleConnsPerHost = MaxExports
			c.http = &http.Client{Transport: t}
		}
	default:
		return nil, fmt.Errorf("unknown OTLP protocol %q", cfg.Protocol)
	}
	return c, nil
}

// Close releases the client's connections.
func (c *Client) Close() error {
	if c.conn != nil {
		return c.conn.Close()
	}
	return nil
}

// Endpoint is where the client sends: the URL it posts to, or the gRPC
// endpoint.
func (c *Client) Endpoint() string { return cmp.Or(c.url, c.cfg.Endpoint) }

// SentBytes counts the bytes of the requests sent so far: HTTP bodies as
// sent (gzip-compressed), gRPC messages as encoded.
func (c *Client) SentBytes() uint64 { return c.sent.Load() }

// PartialError says the receiver accepted a request but rejected some of
// its profiles, which sending again would not change.
type PartialError struct {
	Rejected int64
	Message  string
}

func (e *PartialError) Error() string {
	return fmt.Sprintf("the receiver rejected %d profiles: %s", e.Rejected, e.Message)
}

// HTTPError is an OTLP/HTTP error answer.
type HTTPError struct {
	Code int
	// Body is the start of the answer, which says what the receiver
	// disliked.
	Body string
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("HTTP %d %s: %s", e.Code, http.StatusText(e.Code), e.Body)
}

// Export sends data in one request. It does not retry: test the error
// with Retryable, and send again later if it is worth it.
func (c *Client) Export(ctx context.Context, data *profilespb.ProfilesData) error {
	req := &collectorpb.ExportProfilesServiceRequest{ResourceProfiles: data.ResourceProfiles, Dictionary: data.Dictionary}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	var resp *collectorpb.ExportProfilesServiceResponse
	var err error
	if c.grpc != nil {
		resp, err = c.exportGRPC(ctx, req)
	} else {
		resp, err = c.exportHTTP(ctx, req)
	}
	if err != nil {
		return fmt.Errorf("otlp: %w", err)
	}
	if ps := resp.GetPartialSuccess(); ps != nil && (ps.RejectedProfiles > 0 || ps.ErrorMessage != "") {
		return fmt.Errorf("otlp: %w", &PartialError{Rejected: ps.RejectedProfiles, Message: ps.ErrorMessage})
	}
	return nil
}

func (c *Client) exportGRPC(ctx context.Context, req *collectorpb.ExportProfilesServiceRequest) (*collectorpb.ExportProfilesServiceResponse, error) {
	if len(c.cfg.Headers) > 0 {
		md := metadata.MD{}
		for k, v := range c.cfg.Headers {
			md.Set(strings.ToLower(k), v)
		}
		ctx = metadata.NewOutgoingContext(ctx, md)
	}
	c.sent.Add(uint64(proto.Size(req)))
	return c.grpc.Export(ctx, req)
}

func (c *Client) exportHTTP(ctx context.Context, req *collectorpb.ExportProfilesServiceRequest) (*collectorpb.ExportProfilesServiceResponse, error) {
	raw, err := proto.Marshal(req)
	if err != nil {
		return nil, err
	}
	body := bytes.NewBuffer(c.gz.Bytes(raw))
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, body)
	if err != nil {
		return nil, err
	}
	hr.Header.Set("Content-Type", "application/x-protobuf")
	hr.Header.Set("Content-Encoding", "gzip")
	c.sent.Add(uint64(body.Len()))
	for k, v := range c.cfg.Headers {
		hr.Header.Set(k, v)
	}
	res, err := c.http.Do(hr)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if res.StatusCode/100 != 2 {
		return nil, &HTTPError{Code: res.StatusCode, Body: strings.TrimSpace(string(answer[:min(len(answer), 512)]))}
	}
	resp := &collectorpb.ExportProfilesServiceResponse{}
	if len(answer) > 0 && strings.HasPrefix(res.Header.Get("Content-Type"), "application/x-protobuf") {
		if err := proto.Unmarshal(answer, resp); err != nil {
			return nil, fmt.Errorf("answer: %w", err)
		}
	}
	return resp, nil
}

// Retryable reports whether sending the same profiles again may work, as
// the OTLP specification lists the answers: gRPC Unavailable,
// ResourceExhausted, Aborted, OutOfRange, DataLoss, DeadlineExceeded and
// Canceled (a connection reset on the way), HTTP 429, 502, 503 and 504,
// and network errors. A rejection (invalid data, bad credentials), a
// server certificate that does not verify and a partial success are
// final.
func Retryable(err error) bool {
	var pe *PartialError
	var ce *tls.CertificateVerificationError
	if errors.As(err, &pe) || errors.As(err, &ce) {
		return false
	}
	var he *HTTPError
	if errors.As(err, &he) {
		switch he.Code {
		case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return true
		}
		return false
	}
	if st, ok := status.FromError(err); ok {
		switch st.Code() {
		case codes.Unavailable, codes.ResourceExhausted, codes.Aborted, codes.OutOfRange, codes.DataLoss,
			codes.DeadlineExceeded, codes.Canceled:
			return true
		}
		return false
	}
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded)
}
