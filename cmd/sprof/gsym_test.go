package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sprof/sprof/internal/gsymbench"
	"github.com/sprof/sprof/internal/testenv"
	"github.com/sprof/sprof/symbolize/gsym"
)

const gsymFixtures = "../../testdata/gsym"

// TestGsymCommands converts a fixture, looks addresses up in both of the
// CLI's input forms, and dumps the file.
func TestGsymCommands(t *testing.T) {
	out := filepath.Join(t.TempDir(), "cinline.gsym")
	code, _, stderr := runSprof("gsym", "convert", filepath.Join(gsymFixtures, "cinline"), "-o", out)
	if code != 0 || !strings.Contains(stderr, "Loaded 5 functions from DWARF.") {
		t.Fatalf("convert: exit %d, stderr %q", code, stderr)
	}
	want := "0x00000000000011e8: add + 8 @ /src/cinline.c:11 [inlined]\n" +
		"                    twice + 8 @ /src/cinline.c:15 [inlined]\n" +
		"                    foo + 8 @ /src/cinline.c:19\n" +
		"0x0000000000000010: error: address 0x10 is not in GSYM\n"
	code, stdout, _ := runSprof("gsym", "lookup", out, "0x11e8", "0x10")
	if code != 0 || stdout != "Looking up addresses in \""+out+"\":\n"+want {
		t.Errorf("lookup: exit %d, output %q", code, stdout)
	}
	var o, e bytes.Buffer
	in := strings.NewReader("0x11e8 " + out + "\n0x10 " + out + "\n")
	code = run(&env{in, &o, &e}, []string{"gsym", "lookup", "--addresses-from-stdin"})
	if code != 0 || o.String() != strings.Replace(want, "foo + 8 @ /src/cinline.c:19\n", "foo + 8 @ /src/cinline.c:19\n\n", 1)+"\n" {
		t.Errorf("lookup --addresses-from-stdin: exit %d, output %q, stderr %q", code, o.String(), e.String())
	}
	code, stdout, _ = runSprof("gsym", "dump", out)
	if code != 0 || !strings.Contains(stdout, "Version      = 0x0001") || !strings.Contains(stdout, "twice called from /src/cinline.c:19") {
		t.Errorf("dump: exit %d, output %.300q", code, stdout)
	}
}

func TestGsymConvertVersion2AndBreakpad(t *testing.T) {
	out := filepath.Join(t.TempDir(), "hand.gsym")
	code, _, stderr := runSprof("gsym", "convert", "hand", "--breakpad", filepath.Join(gsymFixtures, "hand.sym"), "--output-version", "2", "-o", out)
	if code != 0 {
		t.Fatalf("convert: exit %d, stderr %q", code, stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil || len(b) < 6 || b[4] != 2 {
		t.Fatalf("output is not version 2: %v", err)
	}
	code, stdout, _ := runSprof("gsym", "lookup", out, "0x1012")
	if code != 0 || !strings.Contains(stdout, "inner helper + 2 @ /src/main.c:11 [inlined]") {
		t.Errorf("lookup: exit %d, output %q", code, stdout)
	}
}

func TestGsymUsage(t *testing.T) {
	for _, args := range [][]string{
		{"gsym"}, {"gsym", "frob"}, {"gsym", "convert"}, {"gsym", "convert", "x", "--output-version", "3"},
		{"gsym", "lookup", "f.gsym"}, {"gsym", "lookup", "f.gsym", "zz"}, {"gsym", "dump"},
	} {
		if code, _, _ := runSprof(args...); code != 2 {
			t.Errorf("sprof %v: exit %d, want 2", args, code)
		}
	}
}

// stdinLookups returns the lines "ADDR FILE" for llvm-gsymutil's
// --addresses-from-stdin of BenchmarkLookup's 100,000 spread addresses.
func stdinLookups(b *testing.B, file string) []byte {
	r, err := gsym.Open(file)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	var in []byte
	for _, a := range gsymbench.Addresses(r, 100_000) {
		in = fmt.Appendf(in, "0x%x %s\n", a, file)
	}
	return in
}

// BenchmarkGsymLookupStdin measures `sprof gsym lookup
// --addresses-from-stdin` in-process on 100,000 addresses in a large Go
// binary: parsing, lookups and output, per line.
func BenchmarkGsymLookupStdin(b *testing.B) {
	in := stdinLookups(b, gsymbench.File(b))
	lines := 0
	cpu0 := gsymbench.CPUTime()
	for b.Loop() {
		var e bytes.Buffer
		if code := run(&env{bytes.NewReader(in), io.Discard, &e}, []string{"gsym", "lookup", "--addresses-from-stdin"}); code != 0 {
			b.Fatalf("exit %d: %s", code, e.String())
		}
		lines += 100_000
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(lines), "ns/lookup")
	b.ReportMetric(float64((gsymbench.CPUTime()-cpu0).Nanoseconds())/float64(lines), "cpu-ns/lookup")
}

// BenchmarkGsymLookupProcess runs `sprof gsym lookup
// --addresses-from-stdin` and `llvm-gsymutil-22 --addresses-from-stdin`
// as whole processes on the same 100,000 addresses in a large Go binary,
// and reports each one's time and sprof's as a fraction of LLVM's (wall
// and CPU). Their outputs must be identical.
func BenchmarkGsymLookupProcess(b *testing.B) {
	llvm := testenv.RequireTool(b, "llvm-gsymutil-22")
	file := gsymbench.File(b)
	sprof := filepath.Join(b.TempDir(), "sprof")
	if out, err := exec.Command("go", "build", "-o", sprof, ".").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	in := stdinLookups(b, file)
	run := func(name string, args ...string) (out []byte, wall, cpu time.Duration) {
		cmd := exec.Command(name, args...)
		cmd.Stdin = bytes.NewReader(in)
		start := time.Now()
		out, err := cmd.Output()
		if err != nil {
			b.Fatalf("%s: %v", name, err)
		}
		return out, time.Since(start), cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	var ours, theirs struct{ wall, cpu time.Duration }
	n := 0
	for b.Loop() {
		o, wall, cpu := run(sprof, "gsym", "lookup", "--addresses-from-stdin")
		ours.wall, ours.cpu = ours.wall+wall, ours.cpu+cpu
		t, wall, cpu := run(llvm, "--addresses-from-stdin")
		theirs.wall, theirs.cpu = theirs.wall+wall, theirs.cpu+cpu
		if !bytes.Equal(o, t) {
			b.Fatal("sprof's output differs from llvm-gsymutil's")
		}
		n++
	}
	b.ReportMetric(float64(ours.wall.Milliseconds())/float64(n), "sprof-ms")
	b.ReportMetric(float64(theirs.wall.Milliseconds())/float64(n), "llvm-ms")
	b.ReportMetric(float64(ours.wall)/float64(theirs.wall), "wall-ratio")
	b.ReportMetric(float64(ours.cpu)/float64(theirs.cpu), "cpu-ratio")
}

// TestGsymLookupStdinOracle feeds the same lines to `sprof gsym lookup
// --addresses-from-stdin` and to llvm-gsymutil-22: addresses around every
// function of every LLVM-written fixture, the files interleaved and
// shuffled, some addresses repeated. The outputs must be identical, with
// the whole input in one batch per file and in chunks of 7 lines.
func TestGsymLookupStdinOracle(t *testing.T) {
	llvm := testenv.RequireTool(t, "llvm-gsymutil-22")
	files, _ := filepath.Glob(filepath.Join(gsymFixtures, "*.llvm.gsym"))
	if len(files) == 0 {
		t.Fatal("no fixtures")
	}
	var lines []string
	for _, file := range files {
		r, err := gsym.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, fmt.Sprintf("0x0 %s", file))
		for i := range r.NumFunctions() {
			f, err := r.FunctionInfo(i)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range []uint64{f.Range.Start, f.Range.Start + 1, f.Range.Start + f.Range.Size()/2, f.Range.End - 1, f.Range.End, f.Range.End + 3} {
				lines = append(lines, fmt.Sprintf("0x%x %s", a, file))
			}
		}
		r.Close()
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for range len(lines) / 8 {
		lines = append(lines, lines[rng.IntN(len(lines))])
	}
	rng.Shuffle(len(lines), func(i, j int) { lines[i], lines[j] = lines[j], lines[i] })
	in := strings.Join(lines, "\n") + "\n"
	cmd := exec.Command(llvm, "--addresses-from-stdin")
	cmd.Stdin = strings.NewReader(in)
	want, err := cmd.Output()
	if err != nil {
		t.Fatalf("llvm-gsymutil: %v", err)
	}
	for _, chunk := range []int{lookupChunkLines, 7} {
		var out bytes.Buffer
		w := bufio.NewWriter(&out)
		if err := lookupFromStdin(strings.NewReader(in), w, chunk); err != nil {
			t.Fatal(err)
		}
		w.Flush()
		if !bytes.Equal(out.Bytes(), want) {
			t.Errorf("chunks of %d lines: %d bytes of output differ from llvm-gsymutil's %d (%d lines in)", chunk, out.Len(), len(want), len(lines))
		}
	}
}
