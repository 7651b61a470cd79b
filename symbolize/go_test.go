package symbolize

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sprof/sprof/stacks"
)

// buildGo builds the Go fixture with the toolchain running the tests.
func buildGo(t *testing.T, ldflags string) string {
	t.Helper()
	needTool(t, "go")
	out := filepath.Join(t.TempDir(), "goprog")
	run(t, "", "go", "build", "-ldflags="+ldflags, "-o", out, filepath.Join(fixtures, "goprog", "main.go"))
	return out
}

// goProbes picks the first, middle and last byte of every text symbol
// `go tool nm` lists.
func goProbes(t *testing.T, bin string) []uint64 {
	var addrs []uint64
	for _, line := range strings.Split(run(t, "", "go", "tool", "nm", "-size", "-sort", "address", bin), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || (f[2] != "T" && f[2] != "t") {
			continue
		}
		addr, err1 := strconv.ParseUint(f[0], 16, 64)
		size, err2 := strconv.ParseUint(f[1], 10, 64)
		if err1 != nil || err2 != nil || size == 0 {
			continue
		}
		addrs = append(addrs, addr, addr+size/2, addr+size-1)
	}
	if len(addrs) < 1000 {
		t.Fatalf("go tool nm lists only %d probes in %s", len(addrs), bin)
	}
	return addrs
}

// TestGoAgainstGoAddr2line checks function, file and line of every Go
// function's first, middle and last byte against `go tool addr2line`, on a
// Go program with symbols and on the same program stripped (-s -w), which
// only its pclntab still names.
func TestGoAgainstGoAddr2line(t *testing.T) {
	needTool(t, "readelf")
	full := buildGo(t, "")
	probes := goProbes(t, full)
	for _, c := range []struct{ name, ldflags string }{{"symbols", ""}, {"stripped", "-s -w"}} {
		t.Run(c.name, func(t *testing.T) {
			bin := full
			if c.ldflags != "" {
				bin = buildGo(t, c.ldflags)
			}
			var in strings.Builder
			for _, a := range probes {
				in.WriteString("0x" + strconv.FormatUint(a, 16) + "\n")
			}
			want := strings.Split(run(t, in.String(), "go", "tool", "addr2line", bin), "\n")
			loads := readelfLoads(t, bin)
			s := NewELF(Options{})
			var frames []stacks.Frame
			checked := 0
			for i, a := range probes {
				fn, pos := want[2*i], want[2*i+1]
				off, ok := fileOffset(loads, a)
				if fn == "?" || !ok {
					continue
				}
				var err error
				frames, err = s.Symbolize(frames[:0], Binary{Path: bin}, off)
				if err != nil {
					t.Fatal(err)
				}
				got := "?"
				gotPos := "?:0"
				if len(frames) == 1 {
					got, gotPos = frames[0].Function, frames[0].File+":"+strconv.Itoa(frames[0].Line)
				}
				if got != fn || gotPos != pos {
					t.Errorf("%#x: %s %s, go tool addr2line says %s %s", a, got, gotPos, fn, pos)
				}
				checked++
			}
			t.Logf("%d of %d probes checked", checked, len(probes))
			if checked < len(probes)*9/10 {
				t.Errorf("only %d of %d probes were checked", checked, len(probes))
			}
		})
	}
}
