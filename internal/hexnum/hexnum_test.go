package hexnum

import (
	"strconv"
	"testing"
)

// TestParse agrees with strconv.ParseUint in base 16 on what both take,
// and refuses what is empty, too long or not hexadecimal.
func TestParse(t *testing.T) {
	for _, s := range []string{"0", "f", "F", "ffffffff81000000", "FFFFFFFFFFFFFFFF", "0123456789abcdef", "", "g", "0x10", "1 ", "-1", "10000000000000000"} {
		got, ok := Parse([]byte(s))
		want, err := strconv.ParseUint(s, 16, 64)
		if ok != (err == nil) || ok && got != want {
			t.Errorf("Parse(%q) = %#x, %v; strconv: %#x, %v", s, got, ok, want, err)
		}
	}
}
