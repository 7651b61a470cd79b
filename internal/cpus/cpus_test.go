package cpus

import (
	"runtime"
	"slices"
	"strings"
	"testing"
)

func TestParseList(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
		err  string
	}{
		{in: "0", want: []int{0}},
		{in: "0-3,6,8-9", want: []int{0, 1, 2, 3, 6, 8, 9}},
		{in: "", err: "empty"},
		{in: "3-1", err: "bad CPU range"},
		{in: "1,1", err: "not increasing"},
		{in: "x", err: "bad CPU number"},
		{in: "0-999999", err: "bad CPU range"},
	} {
		got, err := ParseList(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseList(%q) error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ParseList(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

// TestOnline checks the kernel's list against Go's count of CPUs it may
// run on, which cannot exceed the online ones.
func TestOnline(t *testing.T) {
	list, err := Online()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) < runtime.NumCPU() {
		t.Fatalf("Online() = %v, fewer than runtime.NumCPU() = %d", list, runtime.NumCPU())
	}
}

// FuzzParseList: the parser returns increasing CPU numbers below Max or an
// error.
func FuzzParseList(f *testing.F) {
	for _, s := range []string{"0", "0-1", "0-3,6,8-9", "", "3-1", "1,1", "-", "0-65536", "0,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		list, err := ParseList(s)
		if err != nil {
			return
		}
		for i, c := range list {
			if c < 0 || c >= Max || (i > 0 && c <= list[i-1]) {
				t.Fatalf("ParseList(%q) = %v", s, list)
			}
		}
	})
}
