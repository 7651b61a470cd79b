// Package pyroscopetest is a stand-in Grafana Pyroscope server for tests
// of code that sends profiles to one: it takes what the real server
// takes, refuses what the real server refuses, and answers as late as the
// real server does, so that a client which passes against it has the
// request shapes and the delivery times the real server will see.
//
// The rules follow Pyroscope's documented HTTP API and its handlers
// (v1.x and v2 single binary, default limits):
//
// Push (push.v1.PusherService/Push, Connect): the body is a protobuf
// (application/proto) or JSON (application/json) PushRequest of at most
// -distributor.ingestion-body-limit-mb (256 MB); every raw profile is a
// pprof, gzip-compressed or not, of at most
// -validation.max-profile-size-bytes (4 MiB) once uncompressed and
// -validation.max-profile-stacktrace-samples (16,000) samples, and the
// uncompressed profiles of one request add up to at most the body limit.
// A broken or oversized profile is refused with InvalidArgument; the
// request's other profiles are stored all the same.
//
// Rate limit (both APIs): every profile costs its uncompressed size plus
// its labels' names and values against the tenant's token bucket,
// -distributor.ingestion-rate-limit-mb (4 MiB/s) refilling
// -distributor.ingestion-burst-size-mb (2 MiB); a profile that finds too
// few tokens is refused with ResourceExhausted (/ingest: 429) while the
// other profiles of its request are stored, and a Push request with any
// profile refused is answered with one error alone, naming no profile:
// ResourceExhausted before the storage's error (start-up, below) before
// InvalidArgument. (The server counts the size of the profile as it
// re-encodes it, which is within a few bytes of what was sent.)
//
// /ingest: the query's name is `app{k=v,…}` (parsed by labelset.Parse
// from Pyroscope's api module: 400 when it does not parse); with
// format=pprof the whole body is the pprof (gzip or not) whatever its
// Content-Type; without format= a multipart/form-data body is read as
// pyroscope-go's form: the pprof in the file part "profile" (a part
// without a file name is not read, and then nothing is stored though the
// answer is 200), an optional "sample_type_config" JSON, and a
// "prev_profile" that is refused. A pprof that does not parse is answered
// 422. Other formats (trie, tree, lines, jfr, speedscope, bare "groups")
// are not modelled and are answered 422 here.
//
// Start-up: a server that has just started listens before its storage
// (the segment writers) is ready, and answers every profile meanwhile
// with their gRPC status quoted: Push with Connect code unknown, /ingest
// with HTTP 422 and a JSON body of code "unknown" (SetStarting).
//
// Latency: the server checks a request and its rate limit on arrival,
// writes the profiles into segments flushed every 500 ms
// (-segment-writer.segment-duration) and answers only once the segment
// holding them is flushed, so every request that stores something waits
// for the next flush: requests under way together share one flush,
// requests one after another pay one each; a refusal is answered at once.
// What a request stored stays stored if its client gives up waiting. The
// Server waits until the next multiple of FlushEvery since the Unix
// epoch, which under testing/synctest is exact.
package pyroscopetest

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/google/pprof/profile"
	pushv1 "github.com/grafana/pyroscope/api/gen/proto/go/push/v1"
	"github.com/grafana/pyroscope/api/gen/proto/go/push/v1/pushv1connect"
	"github.com/grafana/pyroscope/api/model/labelset"
	"golang.org/x/time/rate"

	"github.com/sprof/sprof/stacks"
)

// The server's default limits.
const (
	BodyLimit      = 256 << 20
	MaxProfileSize = 4 << 20
	MaxSamples     = 16_000
	// IngestionRate is in bytes per second, IngestionBurst in bytes.
	IngestionRate  = 4 << 20
	IngestionBurst = 2 << 20
)

// DefaultFlushEvery is the server's segment duration.
const DefaultFlushEvery = 500 * time.Millisecond

// Server is a stand-in Pyroscope. Make one with NewServer.
type Server struct {
	// FlushEvery is the segment duration every request waits for; zero
	// answers at once.
	FlushEvery time.Duration
	// IngestionRate (bytes per second) and IngestionBurst (bytes) are the
	// tenant's rate limit; a zero IngestionRate turns it off. Set them
	// before the first request.
	IngestionRate  float64
	IngestionBurst int

	mu       sync.Mutex
	bucket   *rate.Limiter
	limited  int
	received []Profile
	requests int
	inFlight int
	maxIn    int
	fail     []error
	pushIDs  []string
	down     bool
	starting bool
}

// Profile is one profile the server accepted, with its series labels.
type Profile struct {
	// API is "push" or "ingest".
	API    string
	Labels map[string]string
	// Query is the /ingest query; nil for Push.
	Query   map[string]string
	Header  http.Header
	Profile *profile.Profile
}

// HTTPStatus, given to FailNext, answers an /ingest request with that
// status.
type HTTPStatus int

func (s HTTPStatus) Error() string { return http.StatusText(int(s)) }

// NewServer returns a server with the real server's segment duration and
// default rate limit.
func NewServer() *Server {
	return &Server{FlushEvery: DefaultFlushEvery, IngestionRate: IngestionRate, IngestionBurst: IngestionBurst}
}

// Handler serves both APIs.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	path, h := pushv1connect.NewPusherServiceHandler(s, connect.WithReadMaxBytes(BodyLimit))
	mux.Handle(path, s.track(h))
	mux.Handle("POST /ingest", s.track(http.HandlerFunc(s.ingest)))
	return mux
}

// Start serves s on 127.0.0.1 until the test ends and returns its URL,
// for tests that need a real socket.
func (s *Server) Start(t interface{ Cleanup(func()) }) string {
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return srv.URL
}

// Client returns an HTTP client that hands requests to s in memory, so a
// test can run inside a synctest bubble, where sockets are not allowed.
func (s *Server) Client() *http.Client {
	return &http.Client{Transport: inMemory{s, s.Handler()}}
}

// SetDown makes the in-memory client's requests fail as they do against
// a server that is not running (connection refused), or work again.
func (s *Server) SetDown(down bool) {
	s.mu.Lock()
	s.down = down
	s.mu.Unlock()
}

// SetStarting makes the server answer as one whose storage is not ready
// yet, or work again.
func (s *Server) SetStarting(starting bool) {
	s.mu.Lock()
	s.starting = starting
	s.mu.Unlock()
}

// storageUnavailable is the real server's error while its storage is not
// ready: the segment writer's gRPC status, wrapped as Connect code
// unknown.
var storageUnavailable = connect.NewError(connect.CodeUnknown, errors.New("rpc error: code = Unavailable desc = service is unavailable"))

// storageReady reports whether the server may store profiles now.
func (s *Server) storageReady() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.starting
}

// FailNext answers the next requests with errs, one each, before any
// works again: Connect errors for Push, HTTPStatus for /ingest.
func (s *Server) FailNext(errs ...error) {
	s.mu.Lock()
	s.fail = append(s.fail, errs...)
	s.mu.Unlock()
}

// Profiles returns what was accepted so far, in arrival order.
func (s *Server) Profiles() []Profile {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.received)
}

// Requests counts the requests that reached a handler.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// MaxInFlight is the most requests that were under way at once.
func (s *Server) MaxInFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxIn
}

// RateLimited counts the profiles refused for the rate limit.
func (s *Server) RateLimited() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limited
}

// allow takes a profile's cost (size and labels) from the tenant's
// bucket; false when there are too few tokens.
func (s *Server) allow(size int, labels map[string]string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.IngestionRate <= 0 {
		return true
	}
	if s.bucket == nil {
		s.bucket = rate.NewLimiter(rate.Limit(s.IngestionRate), s.IngestionBurst)
	}
	cost := size
	for k, v := range labels {
		cost += len(k) + len(v)
	}
	if s.bucket.AllowN(time.Now(), cost) {
		return true
	}
	s.limited++
	return false
}

// PushIDs lists the ID of every raw profile of every Push request, failed
// ones too, in arrival order.
func (s *Server) PushIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.pushIDs)
}

// inMemory is a RoundTripper that serves requests with a handler.
type inMemory struct {
	s *Server
	h http.Handler
}

func (t inMemory) RoundTrip(r *http.Request) (*http.Response, error) {
	t.s.mu.Lock()
	down := t.s.down
	t.s.mu.Unlock()
	if down {
		if r.Body != nil {
			r.Body.Close()
		}
		return nil, fmt.Errorf("dial tcp %s: %w", r.URL.Host, syscall.ECONNREFUSED)
	}
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, r)
	if err := r.Context().Err(); err != nil {
		return nil, err
	}
	return rec.Result(), nil
}

// track counts requests under way.
func (s *Server) track(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests++
		s.inFlight++
		s.maxIn = max(s.maxIn, s.inFlight)
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			s.inFlight--
			s.mu.Unlock()
		}()
		h.ServeHTTP(w, r)
	})
}

// waitFlush waits for the next segment flush; an error if ctx ends first.
func (s *Server) waitFlush(ctx context.Context) error {
	s.mu.Lock()
	every := s.FlushEvery
	s.mu.Unlock()
	if every <= 0 {
		return nil
	}
	now := time.Now()
	t := time.NewTimer(now.Truncate(every).Add(every).Sub(now))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (s *Server) nextFailure() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.fail) == 0 {
		return nil
	}
	err := s.fail[0]
	s.fail = s.fail[1:]
	return err
}

func (s *Server) accept(ps ...Profile) {
	s.mu.Lock()
	s.received = append(s.received, ps...)
	s.mu.Unlock()
}

// Push implements the Push API.
func (s *Server) Push(ctx context.Context, req *connect.Request[pushv1.PushRequest]) (*connect.Response[pushv1.PushResponse], error) {
	s.mu.Lock()
	for _, rs := range req.Msg.Series {
		for _, raw := range rs.Samples {
			s.pushIDs = append(s.pushIDs, raw.ID)
		}
	}
	s.mu.Unlock()
	if err := s.nextFailure(); err != nil {
		return nil, err
	}
	type parsed struct {
		Profile
		size int
	}
	var valid []parsed
	var invalid, limited error
	total := 0
	for _, rs := range req.Msg.Series {
		labels := map[string]string{}
		for _, l := range rs.Labels {
			labels[l.Name] = l.Value
		}
		for _, raw := range rs.Samples {
			p, size, err := ParsePprof(raw.RawProfile)
			if err != nil {
				invalid = cmp.Or(invalid, error(connect.NewError(connect.CodeInvalidArgument, err)))
				continue
			}
			if total += size; total > BodyLimit {
				return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("uncompressed batched profile payload size exceeds limit"))
			}
			valid = append(valid, parsed{Profile{API: "push", Labels: labels, Header: req.Header().Clone(), Profile: p}, size})
		}
	}
	if len(valid) == 0 {
		return nil, cmp.Or(invalid, error(connect.NewError(connect.CodeInvalidArgument, errors.New("no profiles received"))))
	}
	stored := 0
	var unavailable error
	for _, v := range valid {
		if !s.allow(v.size, v.Labels) {
			limited = cmp.Or(limited, rateLimited(v.size))
			continue
		}
		if !s.storageReady() {
			unavailable = storageUnavailable
			continue
		}
		s.accept(v.Profile)
		stored++
	}
	if stored > 0 {
		if err := s.waitFlush(ctx); err != nil {
			return nil, connect.NewError(connect.CodeCanceled, err)
		}
	}
	if err := cmp.Or(limited, unavailable, invalid); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pushv1.PushResponse{}), nil
}

func rateLimited(size int) error {
	return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("push rate limit exceeded while adding %d bytes", size))
}

// ParsePprof checks a raw profile as the server's distributor does and
// returns it with its uncompressed size.
func ParsePprof(raw []byte) (*profile.Profile, int, error) {
	data := raw
	if bytes.HasPrefix(raw, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return nil, 0, err
		}
		if data, err = io.ReadAll(io.LimitReader(zr, MaxProfileSize+1)); err != nil {
			return nil, 0, err
		}
	}
	if len(data) > MaxProfileSize {
		return nil, 0, fmt.Errorf("uncompressed profile payload size exceeds limit of %d", MaxProfileSize)
	}
	p, err := profile.ParseUncompressed(data)
	if err != nil {
		return nil, 0, err
	}
	if len(p.Sample) > MaxSamples {
		return nil, 0, fmt.Errorf("profile has %d samples, the limit is %d", len(p.Sample), MaxSamples)
	}
	return p, len(data), nil
}

func (s *Server) ingest(w http.ResponseWriter, r *http.Request) {
	if err := s.nextFailure(); err != nil {
		var st HTTPStatus
		if errors.As(err, &st) {
			http.Error(w, st.Error(), int(st))
			return
		}
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	q := r.URL.Query()
	ls, err := labelset.Parse(q.Get("name"))
	if err != nil {
		http.Error(w, "failed to parse request metadata: name: "+err.Error(), http.StatusBadRequest)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, BodyLimit))
	if err != nil {
		http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
		return
	}
	contentType := r.Header.Get("Content-Type")
	var raw []byte
	switch format := q.Get("format"); {
	case format == "pprof":
		raw = body
	case format == "" && strings.Contains(contentType, "multipart/form-data"):
		if raw, err = profileFromForm(contentType, body); err != nil {
			http.Error(w, "failed to parse pprof /ingest multipart form "+err.Error(), http.StatusUnprocessableEntity)
			return
		}
		if raw == nil {
			return // the real server answers 200 and stores nothing
		}
	default:
		http.Error(w, fmt.Sprintf("pyroscopetest: format %q with Content-Type %q is not modelled", format, contentType), http.StatusUnprocessableEntity)
		return
	}
	p, size, err := ParsePprof(raw)
	if err != nil {
		http.Error(w, err.Error(), http.StatusUnprocessableEntity)
		return
	}
	labels := map[string]string{"__name__": "process_cpu", "service_name": ls.ServiceName()}
	for k, v := range ls.Labels() {
		if k != "__name__" {
			labels[k] = v
		}
	}
	if !s.allow(size, labels) {
		http.Error(w, rateLimited(size).Error(), http.StatusTooManyRequests)
		return
	}
	if !s.storageReady() {
		// The handler quotes the distributor's error for the one series
		// of the request, under a code made from the HTTP status.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnprocessableEntity)
		json.NewEncoder(w).Encode(map[string]string{"code": "unknown",
			"message": "pushing IngestInput-pprof failed push series with index 0 and id  failed: " + storageUnavailable.Error()})
		return
	}
	query := map[string]string{}
	for k := range q {
		query[k] = q.Get(k)
	}
	s.accept(Profile{API: "ingest", Labels: labels, Query: query, Header: r.Header.Clone(), Profile: p})
	if err := s.waitFlush(r.Context()); err != nil {
		http.Error(w, "client closed request", 499)
	}
}

// profileFromForm reads pyroscope-go's multipart form as the server does:
// the file part "profile" (nil when there is none, or it is empty), and
// errors for a "prev_profile" or a broken "sample_type_config".
func profileFromForm(contentType string, body []byte) ([]byte, error) {
	_, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return nil, err
	}
	boundary, ok := params["boundary"]
	if !ok {
		return nil, errors.New("malformed multipart content type header")
	}
	form, err := multipart.NewReader(bytes.NewReader(body), boundary).ReadForm(32 << 20)
	if err != nil {
		return nil, err
	}
	defer form.RemoveAll()
	field := func(name string) ([]byte, error) {
		fhs := form.File[name]
		if len(fhs) == 0 || fhs[0].Size == 0 {
			return nil, nil
		}
		f, err := fhs[0].Open()
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return io.ReadAll(f)
	}
	if prev, err := field("prev_profile"); err != nil || prev != nil {
		return nil, errors.Join(err, errors.New("unsupported client version"))
	}
	if cfg, err := field("sample_type_config"); err != nil {
		return nil, err
	} else if cfg != nil {
		var v map[string]any
		if err := json.Unmarshal(cfg, &v); err != nil {
			return nil, err
		}
	}
	return field("profile")
}

// WideProfile has n distinct stacks of depth frames each, one process: a
// profile of a chosen size for tests of the server's limits.
func WideProfile(n, depth int) *stacks.Profile {
	exe := &stacks.Mapping{Kind: stacks.User, Start: 0x400000, Limit: 0x40000000, File: "/usr/bin/wide"}
	p := &stacks.Profile{Start: time.Now(), Duration: time.Second, Period: 1e7, Mappings: []*stacks.Mapping{exe}}
	for i := range n {
		var st []*stacks.Location
		for d := range depth {
			addr := 0x400000 + uint64(i*depth+d)
			st = append(st, &stacks.Location{Mapping: exe, Address: addr,
				Frames: []stacks.Frame{{Function: fmt.Sprintf("function_%d_%d", i, d), File: "/src/wide.c", Line: d + 1}}})
		}
		p.Samples = append(p.Samples, &stacks.Sample{Stack: st, Count: 1, Pid: 1, Comm: "wide"})
	}
	return p
}

// ServicesProfile has services processes, each its own service (named
// svc000, svc001, …) with perService distinct stacks of depth frames,
// of 1, 2, … samples: perService×(perService+1)/2 samples a service.
// 200 services of 30 stacks of 20 frames are a busy host's interval of
// about 7 MB of pprof, over the server's rate limit burst.
func ServicesProfile(services, perService, depth int) *stacks.Profile {
	exe := &stacks.Mapping{Kind: stacks.User, Start: 0x400000, Limit: 0x40000000, File: "/usr/bin/svc"}
	p := &stacks.Profile{Start: time.Now(), Duration: 15 * time.Second, Period: time.Second / 19, Mappings: []*stacks.Mapping{exe}}
	for svc := range services {
		for st := range perService {
			var stack []*stacks.Location
			for d := range depth {
				off := uint64((svc*perService+st)*depth + d)
				stack = append(stack, &stacks.Location{Mapping: exe, Address: 0x400000 + off,
					Frames: []stacks.Frame{{Function: fmt.Sprintf("svc%d_fn%d_%d", svc, st, d), File: "svc.c", Line: d + 1}}})
			}
			p.Samples = append(p.Samples, &stacks.Sample{Stack: stack, Count: int64(st + 1),
				Pid: uint32(1000 + svc), Tid: uint32(1000 + svc), Comm: fmt.Sprintf("svc%03d", svc)})
		}
	}
	return p
}
