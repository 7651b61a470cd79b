package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sprof/sprof/exporters/otlp"
)

func TestAgentOTLPOptions(t *testing.T) {
	t.Setenv(envOTLPHeaders, "Authorization=Basic%20dTpw, X-Extra = 1")
	e := &env{strings.NewReader(""), &bytes.Buffer{}, &bytes.Buffer{}}
	o, err := parseAgent(e, []string{"--otlp-endpoint", "http://collector:4040", "--otlp-protocol", "http",
		"--otlp-header", "X-Scope-OrgID=team-a", "--host", "node-7"})
	if err != nil {
		t.Fatal(err)
	}
	c := o.otlp
	if c == nil || c.Protocol != otlp.HTTP || c.Endpoint != "http://collector:4040" || o.host != "node-7" || o.pyroscope != nil {
		t.Fatalf("otlp config %+v, host %q", c, o.host)
	}
	if c.Headers["Authorization"] != "Basic dTpw" || c.Headers["X-Extra"] != "1" || c.Headers["X-Scope-OrgID"] != "team-a" {
		t.Errorf("headers %v", c.Headers)
	}
	// The profiles signal's variable wins over the general one.
	t.Setenv(envOTLPProfilesHeaders, "Authorization=Bearer%20t")
	if o, err = parseAgent(e, []string{"--otlp-endpoint", "https://collector:4317"}); err != nil || o.otlp.Headers["Authorization"] != "Bearer t" ||
		o.otlp.Protocol != otlp.GRPC || o.otlp.Headers["X-Extra"] != "" {
		t.Errorf("headers %v, protocol %q, %v", o.otlp.Headers, o.otlp.Protocol, err)
	}
}

// TestAgentOTLPHeadersSecret: a broken header variable is refused without
// echoing it: it most likely holds a secret. (TestAgentUsageErrors has the
// flags' errors.)
func TestAgentOTLPHeadersSecret(t *testing.T) {
	t.Setenv(envOTLPHeaders, "Authorization=s3cret%zz")
	if code, _, errs := runSprof("agent", "--otlp-endpoint", "http://127.0.0.1:4317"); code == 0 || strings.Contains(errs, "s3cret") ||
		!strings.Contains(errs, envOTLPHeaders) {
		t.Errorf("a broken %s: exit %d, %q; want an error naming the variable, not the secret", envOTLPHeaders, code, errs)
	}
}
