package agent

import (
	"bufio"
	"errors"
	"regexp"
	"strings"
	"testing"
)

// FuzzParseCredentials: any file content gives credentials or an error,
// and an error never repeats the content, which may be a secret.
func FuzzParseCredentials(f *testing.F) {
	for _, seed := range []string{
		"user=123\npassword=glc_x==\n", "token=abc", "  bare-token==  \n", "# c\n\nuser = u\n",
		"user=u\ntoken=t", "secret-value\nuser=u", "=\n=", "user\n", "\xff\xfe",
	} {
		f.Add([]byte(seed))
	}
	entryError := regexp.MustCompile(`^entry [0-9]+ is not user=…, password=… or token=…$`)
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := parseCredentials(b)
		if err != nil {
			// Only fixed text and a line number.
			if !errors.Is(err, bufio.ErrTooLong) && !entryError.MatchString(err.Error()) {
				t.Fatalf("error %q", err)
			}
			return
		}
		for _, v := range []string{c.User, c.Password, c.Token} {
			if strings.ContainsAny(v, "\n") {
				t.Fatalf("a value spans lines: %+v", c)
			}
		}
	})
}
