package jit

import (
	"reflect"
	"strings"
	"testing"
)

const nodeMap = `7f3c1800a040 1c0 Builtin:ArgumentsAdaptorTrampoline
0x7f3c1800a300 0x84 JS:*hotLoop /tmp/hot.js:3:17
7f3c1800a400 40 LazyCompile:~main file:///tmp/a b.js:10
not a line
7f3c1800a500 0 zero size
7f3c1800a600 10
7f3c1800a700 zz name
`

func parseAll(chunks ...string) ([]Symbol, *PerfMap) {
	var p PerfMap
	var got []Symbol
	for _, c := range chunks {
		p.Feed([]byte(c), func(s Symbol) { got = append(got, s) })
	}
	return got, &p
}

func TestPerfMap(t *testing.T) {
	got, p := parseAll(nodeMap)
	want := []Symbol{
		{Start: 0x7f3c1800a040, Size: 0x1c0, Name: "Builtin:ArgumentsAdaptorTrampoline"},
		{Start: 0x7f3c1800a300, Size: 0x84, Name: "JS:*hotLoop /tmp/hot.js:3:17"},
		{Start: 0x7f3c1800a400, Size: 0x40, Name: "LazyCompile:~main file:///tmp/a b.js:10"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if p.Malformed != 4 || p.Err == nil || !strings.Contains(p.Err.Error(), "line 4") {
		t.Fatalf("Malformed %d, Err %v: want 4, the first naming line 4", p.Malformed, p.Err)
	}
}

// TestPerfMapIncremental feeds the file cut at every byte, as a reader
// racing the writer sees it: the result never changes.
func TestPerfMapIncremental(t *testing.T) {
	whole, _ := parseAll(nodeMap)
	for cut := range len(nodeMap) + 1 {
		got, _ := parseAll(nodeMap[:cut], nodeMap[cut:])
		if !reflect.DeepEqual(got, whole) {
			t.Fatalf("cut at %d: got %+v", cut, got)
		}
	}
	// A line without its newline yet is not a symbol.
	if got, _ := parseAll("1000 10 partial"); len(got) != 0 {
		t.Fatalf("partial line parsed: %+v", got)
	}
}

func TestPerfMapLongLine(t *testing.T) {
	long := "1000 10 " + strings.Repeat("x", maxLine) + "\n2000 10 ok\n"
	for _, cut := range []int{0, 10, maxLine / 2, len(long) - 5} {
		got, p := parseAll(long[:cut], long[cut:])
		if len(got) != 1 || got[0].Name != "ok" || p.Malformed != 1 {
			t.Fatalf("cut %d: got %+v, %d malformed; want only ok and one malformed", cut, got, p.Malformed)
		}
	}
}
