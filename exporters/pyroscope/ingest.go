package pyroscope

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
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

// ingest sends p, a profile of s, to /ingest. The server reads the
// whole body as a pprof when the query says format=pprof (gzip or not); a
// multipart form together with format=pprof is taken for a pprof and
// fails to parse (HTTP 422), and a form without format= is only read from
// a part named "profile" that carries a file name.
func (c *Client) ingest(ctx context.Context, s Series, p part) error {
	endpoint := c.cfg.URL + "/ingest?" + c.ingestQuery(s).Encode()
	return c.post(ctx, endpoint, "application/octet-stream", p.gz)
}

// ingestQuery is the query of an /ingest request for s.
func (c *Client) ingestQuery(s Series) url.Values {
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
	return q
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
