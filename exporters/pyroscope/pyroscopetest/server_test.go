package pyroscopetest

import (
	"bytes"
	"context"
	"fmt"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"
	pushv1 "github.com/grafana/pyroscope/api/gen/proto/go/push/v1"
	"github.com/grafana/pyroscope/api/gen/proto/go/push/v1/pushv1connect"
	typesv1 "github.com/grafana/pyroscope/api/gen/proto/go/types/v1"

	"github.com/sprof/sprof/exporters"
	"github.com/sprof/sprof/stacks"
)

// These tests pin the Server to the rules the package comment lists, one
// rule each, with requests built by hand, so that a client test passing
// against the Server means the request has the shape the real server
// takes.

// rawPprof is a small valid CPU profile, gzip-compressed when gz is set.
func rawPprof(t *testing.T, gz bool) []byte {
	t.Helper()
	pp, err := exporters.BuildPprof(WideProfile(3, 2), exporters.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if gz {
		err = pp.Write(&buf)
	} else {
		err = pp.WriteUncompressed(&buf)
	}
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// form is pyroscope-go's multipart body with the pprof in the part name,
// with a file name unless filename is "".
func form(t *testing.T, name, filename string, raw []byte) ([]byte, string) {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	h := textproto.MIMEHeader{}
	disp := `form-data; name="` + name + `"`
	if filename != "" {
		disp += `; filename="` + filename + `"`
	}
	h.Set("Content-Disposition", disp)
	h.Set("Content-Type", "application/octet-stream")
	part, err := mw.CreatePart(h)
	if err != nil {
		t.Fatal(err)
	}
	part.Write(raw)
	mw.Close()
	return body.Bytes(), mw.FormDataContentType()
}

// postIngest sends body to the server's /ingest with the query and
// Content-Type given and returns the status.
func postIngest(t *testing.T, f *Server, query url.Values, contentType string, body []byte) int {
	t.Helper()
	f.FlushEvery = 0
	req, err := http.NewRequest(http.MethodPost, "http://fake/ingest?"+query.Encode(), bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := f.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func ingestQuery(format string) url.Values {
	q := url.Values{"name": {"web{env=prod}"}}
	if format != "" {
		q.Set("format", format)
	}
	return q
}

func TestFakeIngestFormatPprofReadsWholeBody(t *testing.T) {
	for _, gz := range []bool{true, false} {
		f := NewServer()
		if code := postIngest(t, f, ingestQuery("pprof"), "application/octet-stream", rawPprof(t, gz)); code != http.StatusOK {
			t.Fatalf("gzip=%v: status %d", gz, code)
		}
		got := f.Profiles()
		if len(got) != 1 || got[0].Labels["service_name"] != "web" || got[0].Labels["env"] != "prod" {
			t.Fatalf("gzip=%v: accepted %+v", gz, got)
		}
	}
}

// TestFakeIngestFormatPprofRefusesForm is the combination the real server
// answered 422 ("proto: wrong wireType") on every profile: with
// format=pprof the multipart body is taken for the pprof itself.
func TestFakeIngestFormatPprofRefusesForm(t *testing.T) {
	f := NewServer()
	body, ct := form(t, "profile", "profile.pprof", rawPprof(t, true))
	if code := postIngest(t, f, ingestQuery("pprof"), ct, body); code != http.StatusUnprocessableEntity {
		t.Errorf("status %d, want 422", code)
	}
	if len(f.Profiles()) != 0 {
		t.Error("a form sent with format=pprof was accepted")
	}
}

func TestFakeIngestFormReadsProfilePart(t *testing.T) {
	f := NewServer()
	body, ct := form(t, "profile", "profile.pprof", rawPprof(t, true))
	if code := postIngest(t, f, ingestQuery(""), ct, body); code != http.StatusOK || len(f.Profiles()) != 1 {
		t.Errorf("status %d, %d profiles; want 200 and 1", code, len(f.Profiles()))
	}
}

// TestFakeIngestFormNeedsFileName: the server reads only file parts, so a
// "profile" field without a file name is ignored and nothing is stored,
// though the answer is 200.
func TestFakeIngestFormNeedsFileName(t *testing.T) {
	f := NewServer()
	body, ct := form(t, "profile", "", rawPprof(t, true))
	if code := postIngest(t, f, ingestQuery(""), ct, body); code != http.StatusOK || len(f.Profiles()) != 0 {
		t.Errorf("status %d, %d profiles; want 200 and nothing stored", code, len(f.Profiles()))
	}
}

func TestFakeIngestFormRefusesPrevProfile(t *testing.T) {
	f := NewServer()
	body, ct := form(t, "prev_profile", "p.pprof", rawPprof(t, true))
	if code := postIngest(t, f, ingestQuery(""), ct, body); code != http.StatusUnprocessableEntity {
		t.Errorf("status %d, want 422", code)
	}
}

func TestFakeIngestWithoutFormatOrFormIsNotPprof(t *testing.T) {
	f := NewServer()
	if code := postIngest(t, f, ingestQuery(""), "application/octet-stream", rawPprof(t, true)); code != http.StatusUnprocessableEntity {
		t.Errorf("status %d, want 422", code)
	}
}

func TestFakeIngestBrokenPprof(t *testing.T) {
	f := NewServer()
	if code := postIngest(t, f, ingestQuery("pprof"), "application/octet-stream", []byte("not a profile")); code != http.StatusUnprocessableEntity {
		t.Errorf("status %d, want 422", code)
	}
}

func TestFakeIngestBadName(t *testing.T) {
	f := NewServer()
	q := ingestQuery("pprof")
	q.Set("name", "my app{env=prod}")
	if code := postIngest(t, f, q, "application/octet-stream", rawPprof(t, true)); code != http.StatusBadRequest {
		t.Errorf("name %q: status %d, want 400", q.Get("name"), code)
	}
}

func pushClient(f *Server) pushv1connect.PusherServiceClient {
	return pushv1connect.NewPusherServiceClient(f.Client(), "http://fake")
}

func pushRequest(raws ...[]byte) *pushv1.PushRequest {
	rs := &pushv1.RawProfileSeries{Labels: []*typesv1.LabelPair{{Name: "__name__", Value: "process_cpu"}, {Name: "service_name", Value: "web"}}}
	for _, raw := range raws {
		rs.Samples = append(rs.Samples, &pushv1.RawSample{RawProfile: raw, ID: fmt.Sprintf("00000000-0000-4000-8000-%012d", len(rs.Samples))})
	}
	return &pushv1.PushRequest{Series: []*pushv1.RawProfileSeries{rs}}
}

func TestFakePushAcceptsGzipAndRaw(t *testing.T) {
	f := NewServer()
	f.FlushEvery = 0
	if _, err := pushClient(f).Push(context.Background(), connect.NewRequest(pushRequest(rawPprof(t, true), rawPprof(t, false)))); err != nil {
		t.Fatal(err)
	}
	if n := len(f.Profiles()); n != 2 {
		t.Errorf("%d profiles, want 2", n)
	}
}

func TestFakePushContentType(t *testing.T) {
	f := NewServer()
	f.FlushEvery = 0
	req, _ := http.NewRequest(http.MethodPost, "http://fake"+pushv1connect.PusherServicePushProcedure, bytes.NewReader([]byte{}))
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := f.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Errorf("Content-Type application/octet-stream: status %d, want 415", resp.StatusCode)
	}
}

// TestFakePushRefusesOversizedProfiles: over 4 MiB uncompressed (here
// 300 functions with 16 KiB names, a few KiB compressed), or over 16,000
// samples.
func TestFakePushRefusesOversizedProfiles(t *testing.T) {
	big := WideProfile(300, 1)
	for _, s := range big.Samples {
		s.Stack[0].Frames[0].Function += strings.Repeat("x", 16<<10)
	}
	for name, p := range map[string]*stacks.Profile{"4 MiB": big, "16,001 samples": WideProfile(16_001, 1)} {
		f := NewServer()
		f.FlushEvery = 0
		pp, err := exporters.BuildPprof(p, exporters.Options{})
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		pp.Write(&buf)
		_, err = pushClient(f).Push(context.Background(), connect.NewRequest(pushRequest(buf.Bytes())))
		if connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("over %s: %v, want InvalidArgument", name, err)
		}
	}
}

// TestFakeAnswersAtFlush: a request is answered at the next segment
// flush; requests under way together share it.
func TestFakeAnswersAtFlush(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := NewServer()
		c := pushClient(f)
		raw := rawPprof(t, true)
		time.Sleep(100 * time.Millisecond) // mid-segment
		start := time.Now()
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				if _, err := c.Push(context.Background(), connect.NewRequest(pushRequest(raw))); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if d := time.Since(start); d != 400*time.Millisecond {
			t.Errorf("3 concurrent pushes took %v, want 400ms (to the next flush)", d)
		}
		start = time.Now()
		for range 3 {
			c.Push(context.Background(), connect.NewRequest(pushRequest(raw)))
		}
		if d := time.Since(start); d != 1500*time.Millisecond {
			t.Errorf("3 pushes one after another took %v, want 1.5s", d)
		}
	})
}

// widePprof is a gzip-compressed pprof of about n×550 bytes uncompressed.
func widePprof(t *testing.T, n int) []byte {
	t.Helper()
	pp, err := exporters.BuildPprof(WideProfile(n, 10), exporters.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	pp.Write(&buf)
	return buf.Bytes()
}

// TestFakePushKeepsValidProfiles: a broken profile fails the request,
// but the request's valid profiles are stored.
func TestFakePushKeepsValidProfiles(t *testing.T) {
	f := NewServer()
	f.FlushEvery = 0
	_, err := pushClient(f).Push(context.Background(), connect.NewRequest(pushRequest([]byte("not a profile"), rawPprof(t, true))))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || len(f.Profiles()) != 1 {
		t.Errorf("%v, %d profiles stored; want InvalidArgument and the valid one stored", err, len(f.Profiles()))
	}
}

// TestFakePushRateLimit: three profiles of about 800 KB in one request
// find a 2 MiB bucket; two are stored, the third is refused, and the
// request is answered ResourceExhausted. A second later (4 MiB/s) the
// bucket is full again.
func TestFakePushRateLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := NewServer()
		f.FlushEvery = 0
		raw := widePprof(t, 1500)
		_, err := pushClient(f).Push(context.Background(), connect.NewRequest(pushRequest(raw, raw, raw)))
		if connect.CodeOf(err) != connect.CodeResourceExhausted || len(f.Profiles()) != 2 || f.RateLimited() != 1 {
			t.Errorf("%v, %d stored, %d refused; want ResourceExhausted, 2 stored, 1 refused", err, len(f.Profiles()), f.RateLimited())
		}
		time.Sleep(time.Second)
		if _, err := pushClient(f).Push(context.Background(), connect.NewRequest(pushRequest(raw, raw))); err != nil {
			t.Errorf("after a second: %v", err)
		}
	})
}

// TestFakeIngestRateLimit: /ingest answers 429 to a profile past the
// bucket, here one larger than the burst.
func TestFakeIngestRateLimit(t *testing.T) {
	f := NewServer()
	if code := postIngest(t, f, ingestQuery("pprof"), "application/octet-stream", widePprof(t, 4500)); code != http.StatusTooManyRequests {
		t.Errorf("status %d, want 429", code)
	}
}
