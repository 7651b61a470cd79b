package agent

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Credentials authenticate the agent to Pyroscope: basic auth (Grafana
// Cloud's user id and API token, or a reverse proxy's) or a bearer token.
type Credentials struct {
	User, Password string
	Token          string
}

// Environment variables LoadCredentials reads when there is no file.
const (
	EnvUser     = "SPROF_PYROSCOPE_USER"
	EnvPassword = "SPROF_PYROSCOPE_PASSWORD"
	EnvToken    = "SPROF_PYROSCOPE_TOKEN"
)

// maxAuthFile bounds the credentials file: a few lines, never a megabyte.
const maxAuthFile = 64 << 10

// LoadCredentials reads the credentials from path when it is not empty,
// else from the environment through getenv (os.Getenv). The file holds
// lines `user=…`, `password=…` or `token=…` (blank lines and lines starting
// with # are skipped), or a single line that is the bearer token itself,
// as a Kubernetes secret mounted as a file is.
func LoadCredentials(path string, getenv func(string) string) (Credentials, error) {
	var c Credentials
	if path == "" {
		c = Credentials{User: getenv(EnvUser), Password: getenv(EnvPassword), Token: getenv(EnvToken)}
	} else {
		b, err := readSmall(path, maxAuthFile)
		if err != nil {
			return Credentials{}, fmt.Errorf("read credentials: %w", err)
		}
		if c, err = parseCredentials(b); err != nil {
			return Credentials{}, fmt.Errorf("credentials file %s: %w", path, err)
		}
	}
	if c.Token != "" && (c.User != "" || c.Password != "") {
		return Credentials{}, errors.New("credentials: give a token or a user and password, not both")
	}
	return c, nil
}

func readSmall(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(f, limit+1)); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(buf.Len()) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return buf.Bytes(), nil
}

func parseCredentials(b []byte) (Credentials, error) {
	var c Credentials
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" && !strings.HasPrefix(line, "#") {
			lines = append(lines, line)
		}
	}
	if err := sc.Err(); err != nil {
		return c, err
	}
	for i, line := range lines {
		key, value, ok := strings.Cut(line, "=")
		var dst *string
		switch strings.TrimSpace(key) {
		case "user":
			dst = &c.User
		case "password":
			dst = &c.Password
		case "token":
			dst = &c.Token
		}
		switch {
		case ok && dst != nil:
			*dst = strings.TrimSpace(value)
		case len(lines) == 1:
			c.Token = line // a bare token, which may end in base64's '='
		default:
			// The line may be a secret: say where it is, not what.
			return Credentials{}, fmt.Errorf("entry %d is not user=…, password=… or token=…", i+1)
		}
	}
	return c, nil
}
