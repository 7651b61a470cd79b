package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLoadCredentials(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, file string
		want       Credentials
		err        string
	}{
		{"pairs", "# Grafana Cloud\nuser=123456\npassword = glc_abc=\n", Credentials{User: "123456", Password: "glc_abc="}, ""},
		{"token line", "token=abc\n", Credentials{Token: "abc"}, ""},
		{"bare token", "\n  eyJhbGciOi.payload.sig==  \n", Credentials{Token: "eyJhbGciOi.payload.sig=="}, ""},
		{"both", "user=u\ntoken=t\n", Credentials{}, "not both"},
		{"unknown key", "user=u\nsecret-value\n", Credentials{}, "entry 2 is not"},
		{"empty", "", Credentials{}, ""},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
		if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := LoadCredentials(path, nil)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want one with %q", tc.name, err, tc.err)
			}
			if err != nil && strings.Contains(err.Error(), "secret-value") {
				t.Errorf("%s: the error shows the file's content: %v", tc.name, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: got %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
	if _, err := LoadCredentials(filepath.Join(dir, "missing"), nil); err == nil {
		t.Error("a missing file gave no error")
	}
	big := filepath.Join(dir, "big")
	os.WriteFile(big, make([]byte, maxAuthFile+1), 0o600)
	if _, err := LoadCredentials(big, nil); err == nil || !strings.Contains(err.Error(), "larger") {
		t.Errorf("an oversized file: %v", err)
	}
}

func TestLoadCredentialsFromEnvironment(t *testing.T) {
	env := map[string]string{EnvUser: "u", EnvPassword: "p"}
	got, err := LoadCredentials("", func(k string) string { return env[k] })
	if err != nil || got != (Credentials{User: "u", Password: "p"}) {
		t.Errorf("got %+v, %v", got, err)
	}
	env = map[string]string{EnvToken: "t"}
	if got, _ := LoadCredentials("", func(k string) string { return env[k] }); got != (Credentials{Token: "t"}) {
		t.Errorf("got %+v", got)
	}
}

// TestReloadCredentials: a reload (SIGHUP) re-reads the credentials file,
// so a rotated token is used without a restart.
func TestReloadCredentials(t *testing.T) {
	srv := newFakePyroscope(t)
	path := filepath.Join(t.TempDir(), "auth")
	if err := os.WriteFile(path, []byte("token=one\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := New(&fakeRecorder{}, Config{Interval: 50 * time.Millisecond, DrainEvery: 10 * time.Millisecond, ProcRoot: fakeProc(t),
		Pyroscope:   pyroscopeConfig(srv.url()),
		Credentials: func() (Credentials, error) { return LoadCredentials(path, nil) }})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, a)
	waitFor(t, "a push", 5*time.Second, func() bool { return len(srv.received()) > 0 })
	if err := os.WriteFile(path, []byte("token=two\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a.Reload()
	waitFor(t, "the new token", 5*time.Second, func() bool {
		got := srv.received()
		return got[len(got)-1].auth == "Bearer two"
	})
	stop()
	for _, p := range srv.received() {
		if p.auth != "Bearer one" && p.auth != "Bearer two" {
			t.Errorf("Authorization %q", p.auth)
		}
	}
}
