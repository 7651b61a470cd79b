package pyroscope

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// StatusError is an HTTP error answer from /ingest.
type StatusError struct {
	Code int
	// Body is the start of the answer, which says what the server disliked.
	Body string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("HTTP %d %s: %s", e.Code, http.StatusText(e.Code), e.Body)
}

// ingestAll posts each raw profile to the legacy /ingest endpoint.
func (c *Client) ingestAll(ctx context.Context, s Series, raws [][]byte) error {
	p := s.Profile
	q := url.Values{}
	q.Set("name", c.ingestName(s))
	q.Set("format", "pprof")
	q.Set("spyName", "sprof")
	if !p.Start.IsZero() {
		q.Set("from", strconv.FormatInt(p.Start.Unix(), 10))
		q.Set("until", strconv.FormatInt(p.Start.Add(max(p.Duration, time.Second)).Unix(), 10))
	}
	if p.Period > 0 {
		q.Set("sampleRate", strconv.FormatInt(int64(time.Second/p.Period), 10))
	}
	endpoint := c.cfg.URL + "/ingest?" + q.Encode()
	for _, raw := range raws {
		body, contentType := multipartProfile(raw)
		err := c.retry(ctx, func(ctx context.Context) error { return c.post(ctx, endpoint, contentType, body) })
		if err != nil {
			return fmt.Errorf("ingest: %w", err)
		}
	}
	return nil
}

// ingestName is the name parameter: `app{k=v,…}`, the app name standing for
// service_name. /ingest parses it loosely, so characters with a meaning in
// that syntax are replaced.
func (c *Client) ingestName(s Series) string {
	var b strings.Builder
	b.WriteString(strings.Map(func(r rune) rune {
		if r == '_' || r == '.' || r == '-' || r == '/' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			return r
		}
		return '_'
	}, s.Service))
	b.WriteByte('{')
	escape := strings.NewReplacer(",", "_", "{", "_", "}", "_", "=", "_")
	first := true
	for _, l := range c.labels(s) {
		if l.Name == labelName || l.Name == labelService {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		b.WriteString(l.Name + "=" + escape.Replace(l.Value))
	}
	b.WriteByte('}')
	return b.String()
}

// multipartProfile wraps a pprof in the form pyroscope-go sends.
func multipartProfile(raw []byte) ([]byte, string) {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", `form-data; name="profile"; filename="profile.pprof"`)
	h.Set("Content-Type", "application/octet-stream")
	part, _ := mw.CreatePart(h) // writes to a bytes.Buffer cannot fail
	part.Write(raw)
	mw.Close()
	return body.Bytes(), mw.FormDataContentType()
}

func (c *Client) post(ctx context.Context, endpoint, contentType string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return &StatusError{Code: resp.StatusCode, Body: strings.TrimSpace(string(msg))}
	}
	return nil
}
