package debuginfod

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sprof/sprof/symbolize/buildid"
)

// ErrNotFound is returned when no server has a debug file for a build ID,
// or when that was found recently (a cached miss).
var ErrNotFound = errors.New("debuginfod: no server has the debug file")

// Defaults of a Client's zero fields.
const (
	// DefaultTimeout bounds one request, body included: a debug file of a
	// large program is hundreds of megabytes, but a profiler waiting
	// longer for one binary's lines serves its user worse than a profile
	// without them.
	DefaultTimeout = 90 * time.Second
	// DefaultMaxBytes caps a debug file (libxul's is 1.5 GiB; anything
	// larger is more likely a hostile server than a real file).
	DefaultMaxBytes = 2 << 30
	// DefaultMissTTL is how long a miss is remembered, as elfutils'
	// client remembers its misses for 600 s.
	DefaultMissTTL = 10 * time.Minute
)

// Client fetches debug files into Dir. A Client is safe for concurrent
// use; concurrent fetches of the same build ID each download it (callers
// such as symbolize.GSYM fetch once per binary).
type Client struct {
	// URLs are the servers' base URLs, asked in order.
	URLs []string
	// Dir keeps fetched files as DIR/.build-id/xx/rest.debug, and misses
	// as rest.miss beside them.
	Dir string
	// Timeout bounds each request; 0 means DefaultTimeout.
	Timeout time.Duration
	// MaxBytes caps a debug file; 0 means DefaultMaxBytes.
	MaxBytes int64
	// MissTTL is how long a miss is remembered; 0 means DefaultMissTTL.
	MissTTL time.Duration
	// HTTP is the client used; nil means http.DefaultClient's transport.
	HTTP *http.Client
}

// FromEnv returns a Client of the servers in DEBUGINFOD_URLS (separated by
// spaces), keeping files in dir, or nil when the variable names none.
// DEBUGINFOD_TIMEOUT (seconds), when set, bounds each request.
func FromEnv(dir string) *Client {
	urls := strings.Fields(os.Getenv("DEBUGINFOD_URLS"))
	if len(urls) == 0 {
		return nil
	}
	c := &Client{URLs: urls, Dir: dir}
	if s := os.Getenv("DEBUGINFOD_TIMEOUT"); s != "" {
		if d, err := time.ParseDuration(s + "s"); err == nil && d > 0 {
			c.Timeout = d
		}
	}
	return c
}

// Fetch returns the path of the debug file of the binary with build ID id
// (lower-case hex), downloading it into Dir unless it is there already.
// It returns an error matching ErrNotFound when no server has it.
func (c *Client) Fetch(ctx context.Context, id string) (string, error) {
	if !buildid.Valid(id) {
		return "", fmt.Errorf("debuginfod: build ID %q is not lower-case hex", id)
	}
	dir := filepath.Join(c.Dir, ".build-id", id[:2])
	final := filepath.Join(dir, id[2:]+".debug")
	miss := filepath.Join(dir, id[2:]+".miss")
	if _, err := os.Stat(final); err == nil {
		return final, nil
	}
	if st, err := os.Stat(miss); err == nil && time.Since(st.ModTime()) < c.missTTL() {
		return "", fmt.Errorf("%w: %s (missed %s ago)", ErrNotFound, id, time.Since(st.ModTime()).Round(time.Second))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("debuginfod: %w", err)
	}
	var errs []error
	for _, u := range c.URLs {
		err := c.fetchFrom(ctx, u, id, final)
		if err == nil {
			os.Remove(miss)
			return final, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	err := errors.Join(errs...)
	if allMisses(errs) {
		// Only answers that the server lacks the file are remembered;
		// a timeout or a refused connection is tried again next time.
		if f, ferr := os.Create(miss); ferr == nil {
			f.Close()
		}
		return "", fmt.Errorf("%w: %s: %w", ErrNotFound, id, err)
	}
	return "", err
}

func allMisses(errs []error) bool {
	for _, err := range errs {
		if !errors.Is(err, ErrNotFound) {
			return false
		}
	}
	return len(errs) > 0
}

// fetchFrom downloads id's debug file from one server into final, through
// a temporary file renamed into place once its build ID checks out.
func (c *Client) fetchFrom(ctx context.Context, base, id, final string) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	url := strings.TrimSuffix(base, "/") + "/buildid/" + id + "/debuginfo"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("debuginfod: %w", err)
	}
	resp, err := c.client().Do(req)
	if err != nil {
		return fmt.Errorf("debuginfod: %w", err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("%s: %w", url, ErrNotFound)
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("debuginfod: %s: %s", url, resp.Status)
	case resp.ContentLength > c.maxBytes():
		return fmt.Errorf("debuginfod: %s: %d bytes, over the cap of %d", url, resp.ContentLength, c.maxBytes())
	}
	f, err := os.CreateTemp(filepath.Dir(final), "."+filepath.Base(final)+".tmp*")
	if err != nil {
		return fmt.Errorf("debuginfod: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after a successful rename, a no-op
	n, err := io.Copy(f, io.LimitReader(resp.Body, c.maxBytes()+1))
	if err == nil && n > c.maxBytes() {
		err = fmt.Errorf("more than the cap of %d bytes", c.maxBytes())
	}
	if err == nil {
		var got string
		if got, err = buildid.Read(f); err == nil && got != id {
			err = fmt.Errorf("the file has build ID %s", got)
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("debuginfod: %s: %w", url, err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("debuginfod: %w", err)
	}
	return nil
}

func (c *Client) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return DefaultTimeout
}

func (c *Client) maxBytes() int64 {
	if c.MaxBytes > 0 {
		return c.MaxBytes
	}
	return DefaultMaxBytes
}

func (c *Client) missTTL() time.Duration {
	if c.MissTTL > 0 {
		return c.MissTTL
	}
	return DefaultMissTTL
}

func (c *Client) client() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}
