package otlp

import (
	"compress/gzip"
	"context"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/profiles/v1development"
	profilespb "go.opentelemetry.io/proto/otlp/profiles/v1development"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"

	"github.com/sprof/sprof/exporters"
	"github.com/sprof/sprof/stacks"
)

// receiver is an OTLP profiles receiver made of the bindings' own gRPC
// service and, for HTTP, the rules of the OTLP/HTTP specification.
type receiver struct {
	collectorpb.UnimplementedProfilesServiceServer
	mu       sync.Mutex
	requests []*collectorpb.ExportProfilesServiceRequest
	headers  []map[string]string
	fail     error
	partial  *collectorpb.ExportProfilesPartialSuccess
}

func (r *receiver) Export(ctx context.Context, req *collectorpb.ExportProfilesServiceRequest) (*collectorpb.ExportProfilesServiceResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	h := map[string]string{}
	for k, v := range md {
		h[k] = v[0]
	}
	return r.record(req, h)
}

func (r *receiver) record(req *collectorpb.ExportProfilesServiceRequest, h map[string]string) (*collectorpb.ExportProfilesServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests = append(r.requests, req)
	r.headers = append(r.headers, h)
	if r.fail != nil {
		return nil, r.fail
	}
	return &collectorpb.ExportProfilesServiceResponse{PartialSuccess: r.partial}, nil
}

// ServeHTTP takes POST /v1development/profiles with a protobuf body,
// gzip-compressed or not, as the OTLP/HTTP specification says.
func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != Path {
		http.NotFound(w, req)
		return
	}
	if req.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "unsupported content type", http.StatusUnsupportedMediaType)
		return
	}
	body := io.Reader(req.Body)
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	raw, err := io.ReadAll(body)
	msg := &collectorpb.ExportProfilesServiceRequest{}
	if err == nil {
		err = proto.Unmarshal(raw, msg)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	h := map[string]string{}
	for k := range req.Header {
		h[strings.ToLower(k)] = req.Header.Get(k)
	}
	resp, err := r.record(msg, h)
	if err != nil {
		code := http.StatusBadRequest
		if status.Code(err) == codes.Unavailable {
			code = http.StatusServiceUnavailable
		}
		http.Error(w, err.Error(), code)
		return
	}
	out, _ := proto.Marshal(resp)
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

// startGRPC serves r over an in-memory connection and returns the dial
// option that reaches it.
func startGRPC(t *testing.T, r *receiver) grpc.DialOption {
	l := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	collectorpb.RegisterProfilesServiceServer(srv, r)
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	return grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return l.DialContext(ctx) })
}

func testData(t *testing.T) *profilespb.ProfilesData {
	t.Helper()
	exe := &stacks.Mapping{Kind: stacks.User, Start: 0x400000, Limit: 0x500000, File: "/usr/bin/web", BuildID: "abcd"}
	loc := &stacks.Location{Mapping: exe, Address: 0x401000, Frames: []stacks.Frame{{Function: "serve", File: "web.go", Line: 3}}}
	p := &stacks.Profile{Start: time.Now(), Duration: 15 * time.Second, Period: time.Second / 19, Mappings: []*stacks.Mapping{exe},
		Samples: []*stacks.Sample{{Stack: []*stacks.Location{loc}, Count: 4, Pid: 10, Tid: 10, Comm: "web"}}}
	data, err := exporters.BuildOTLP(p, exporters.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestExportGRPC(t *testing.T) {
	r := &receiver{}
	c, err := New(Config{Endpoint: "http://collector:4317", Headers: map[string]string{"Authorization": "Bearer s3cret", "X-Scope-OrgID": "team-a"},
		DialOptions: []grpc.DialOption{startGRPC(t, r)}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Export(context.Background(), testData(t)); err != nil {
		t.Fatal(err)
	}
	if len(r.requests) != 1 || len(r.requests[0].ResourceProfiles) != 1 || r.requests[0].Dictionary == nil {
		t.Fatalf("requests %v", r.requests)
	}
	if h := r.headers[0]; h["authorization"] != "Bearer s3cret" || h["x-scope-orgid"] != "team-a" {
		t.Errorf("metadata %v", h)
	}
}

func TestExportHTTP(t *testing.T) {
	r := &receiver{}
	srv := httptest.NewServer(r)
	defer srv.Close()
	c, err := New(Config{Endpoint: srv.URL, Protocol: HTTP, Headers: map[string]string{"Authorization": "Basic dTpw"}})
	if err != nil {
		t.Fatal(err)
	}
	if c.Endpoint() != srv.URL+Path {
		t.Errorf("endpoint %s, want %s", c.Endpoint(), srv.URL+Path)
	}
	if err := c.Export(context.Background(), testData(t)); err != nil {
		t.Fatal(err)
	}
	if len(r.requests) != 1 || r.headers[0]["authorization"] != "Basic dTpw" || r.headers[0]["content-encoding"] != "gzip" {
		t.Fatalf("%d requests, headers %v", len(r.requests), r.headers)
	}
	got := r.requests[0].ResourceProfiles[0].ScopeProfiles[0].Profiles[0]
	if len(got.Samples) != 1 || got.Samples[0].Values[0] != 4 {
		t.Errorf("profile %v", got)
	}
}

// TestExportTLS: https uses TLS, trusting the CA file given.
func TestExportTLS(t *testing.T) {
	r := &receiver{}
	srv := httptest.NewTLSServer(r)
	defer srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Endpoint: srv.URL, Protocol: HTTP, CAFile: ca})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Export(context.Background(), testData(t)); err != nil {
		t.Fatal(err)
	}
	c, err = New(Config{Endpoint: srv.URL, Protocol: HTTP})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Export(context.Background(), testData(t)); err == nil || Retryable(err) {
		t.Errorf("a server certificate nobody vouches for: %v, want a final error", err)
	}
}

func TestExportErrors(t *testing.T) {
	for _, tc := range []struct {
		name      string
		fail      error
		partial   *collectorpb.ExportProfilesPartialSuccess
		retryable bool
	}{
		{"unavailable", status.Error(codes.Unavailable, "down"), nil, true},
		{"invalid", status.Error(codes.InvalidArgument, "bad"), nil, false},
		{"partial", nil, &collectorpb.ExportProfilesPartialSuccess{RejectedProfiles: 1, ErrorMessage: "too old"}, false},
	} {
		for _, proto := range []Protocol{GRPC, HTTP} {
			r := &receiver{fail: tc.fail, partial: tc.partial}
			cfg := Config{Endpoint: "http://collector:4317", Protocol: proto, DialOptions: []grpc.DialOption{startGRPC(t, r)}}
			if proto == HTTP {
				srv := httptest.NewServer(r)
				defer srv.Close()
				cfg.Endpoint = srv.URL
			}
			c, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			err = c.Export(context.Background(), testData(t))
			if err == nil || Retryable(err) != tc.retryable {
				t.Errorf("%s over %s: %v, retryable %v; want retryable %v", tc.name, proto, err, Retryable(err), tc.retryable)
			}
			var pe *PartialError
			if tc.partial != nil && (!errors.As(err, &pe) || pe.Rejected != 1) {
				t.Errorf("%s over %s: %v, want a PartialError", tc.name, proto, err)
			}
			c.Close()
		}
	}
}

func TestExportServerDown(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	for _, proto := range []Protocol{GRPC, HTTP} {
		c, err := New(Config{Endpoint: url, Protocol: proto, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Export(context.Background(), testData(t)); err == nil || !Retryable(err) {
			t.Errorf("%s to a closed port: %v, want a retryable error", proto, err)
		}
		c.Close()
	}
}

func TestConfigChecks(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Endpoint: "collector:4317"}, "http:// or https://"},
		{Config{Endpoint: "http://c", Protocol: "thrift"}, "protocol"},
		{Config{Endpoint: "http://c", CAFile: "/nonexistent"}, "https://"},
		{Config{Endpoint: "https://c", CAFile: "/nonexistent"}, "CA file"},
		{Config{Endpoint: "http://c", Headers: map[string]string{"a b": "x"}}, "header"},
	} {
		if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error about %q", tc.cfg, err, tc.want)
		}
	}
	if p, err := ParseProtocol("http"); err != nil || p != HTTP {
		t.Errorf("ParseProtocol(http) = %q, %v", p, err)
	}
}
