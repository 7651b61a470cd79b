package recording

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sprof/sprof/cbf"
)

// The fixture testdata/cbf/gobuild.sprof holds real samples: those perf
// recorded (perf record -g) while Go compiled the standard library, turned
// into a recording by TestPerfFixture. scripts/cbf-fixture.sh rebuilds it.
var (
	perfDump = flag.String("perfdump", "", "convert this `perf script -D` output to the fixture recording")
	buildIDs = flag.String("buildids", "", "`file` of perf buildid-list output for -perfdump")
	update   = flag.Bool("update", false, "rewrite the golden files")
)

const (
	fixture       = "../../testdata/cbf/gobuild.sprof"
	fixtureGolden = "../../testdata/cbf/gobuild.summary"
)

// Context markers perf puts in callchains (PERF_CONTEXT_*).
const (
	perfContextKernel = 0xffffffffffffff80
	perfContextUser   = 0xfffffffffffffe00
	perfContextMax    = 0xfffffffffffff001
)

var (
	perfSample = regexp.MustCompile(`^(\d+) (\d+) 0x[0-9a-f]+ \[0x[0-9a-f]+\]: PERF_RECORD_SAMPLE\([^)]*\): (\d+)/(\d+): `)
	perfChain  = regexp.MustCompile(`^\.+\s+\d+: ([0-9a-f]+)$`)
	perfMmap   = regexp.MustCompile(`PERF_RECORD_MMAP2? (-?\d+)/\d+: \[0x([0-9a-f]+)\(0x([0-9a-f]+)\) @ (0x[0-9a-f]+|\d+)[^\]]*\]: (\S+) (.*)$`)
	perfComm   = regexp.MustCompile(`PERF_RECORD_COMM(?: exec)?: (.*):(\d+)/(\d+)$`)
	perfFork   = regexp.MustCompile(`PERF_RECORD_FORK\((\d+):\d+\):\((\d+):\d+\)`)
)

// perfConverter turns perf's raw dump into recording calls, tracking the
// executable mappings and names of each process as perf reports them.
type perfConverter struct {
	w        *Writer
	clock    *fakeClock
	t0       int64
	ids      map[string][]byte
	maps     map[int][]cbf.Image
	dirty    map[int]bool
	comms    map[int]string
	threads  map[int]string
	kernel   []cbf.Image
	wroteKrn bool
}

func (c *perfConverter) imageMap(images []cbf.Image) *cbf.ImageMap {
	// Later mappings of a range replace earlier ones, as in the process.
	var kept []cbf.Image
	for i, im := range images {
		overlapped := false
		for _, later := range images[i+1:] {
			if later.Base < im.EndOfText && im.Base < later.EndOfText {
				overlapped = true
			}
		}
		if !overlapped {
			kept = append(kept, im)
		}
	}
	m, err := cbf.NewImageMap("", cbf.Word64, kept)
	if err != nil {
		panic(err)
	}
	return m
}

func (c *perfConverter) mmap(m []string) {
	pid, _ := strconv.Atoi(m[1])
	start, _ := strconv.ParseUint(m[2], 16, 64)
	size, _ := strconv.ParseUint(m[3], 16, 64)
	off, _ := strconv.ParseUint(m[4], 0, 64)
	prot, path := m[5], strings.TrimSpace(m[6])
	im := cbf.Image{Path: path, BuildID: c.ids[path], Base: start, EndOfText: start + size, TextOffset: off}
	if pid == -1 {
		im.TextOffset = 0
		if strings.HasPrefix(path, "[kernel.kallsyms]") {
			im.Path, im.BuildID = "[kernel.kallsyms]", c.ids["[kernel.kallsyms]"]
		}
		c.kernel = append(c.kernel, im)
		return
	}
	if !strings.Contains(prot, "x") {
		return
	}
	c.maps[pid] = append(c.maps[pid], im)
	c.dirty[pid] = true
}

func (c *perfConverter) sample(cpu, pid, tid int, t int64, chain []uint64) {
	c.clock.t = c.clock.at(time.Duration(t - c.t0))
	if !c.wroteKrn && len(c.kernel) > 0 {
		c.w.Kernel(c.imageMap(c.kernel))
		c.wroteKrn = true
	}
	if c.dirty[pid] {
		c.w.Process(c.clock.t, uint32(pid), c.comms[pid], c.imageMap(c.maps[pid]))
		c.dirty[pid] = false
	}
	var user, kernel []uint64
	var into *[]uint64
	for _, a := range chain {
		switch {
		case a == perfContextKernel:
			into = &kernel
		case a == perfContextUser:
			into = &user
		case a >= perfContextMax || into == nil:
		default:
			*into = append(*into, a)
		}
	}
	comm := c.threads[tid]
	if comm == "" {
		comm = c.comms[pid]
	}
	c.w.Sample(c.clock.t, uint32(pid), uint32(tid), uint32(cpu), comm, user, kernel, 0, 1)
}

// convertPerfDump writes the recording of a perf script -D dump and
// returns the bytes perf's sample records took.
func convertPerfDump(t *testing.T, dump *os.File, ids map[string][]byte, out *bytes.Buffer) int {
	clock := newFakeClock()
	w, err := NewWriter(out, Options{Clock: clock.now, Host: "fixture", Kernel: "6.18", Arch: "x86_64", Frequency: 99})
	if err != nil {
		t.Fatal(err)
	}
	c := &perfConverter{w: w, clock: clock, t0: -1, ids: ids, maps: map[int][]cbf.Image{}, dirty: map[int]bool{},
		comms: map[int]string{}, threads: map[int]string{}}
	sampleBytes := 0
	sc := bufio.NewScanner(dump)
	sc.Buffer(nil, 1<<20)
	var pending []string // the sample line being read
	var chain []uint64
	flushSample := func() {
		if pending == nil {
			return
		}
		cpu, _ := strconv.Atoi(pending[1])
		tm, _ := strconv.ParseInt(pending[2], 10, 64)
		pid, _ := strconv.Atoi(pending[3])
		tid, _ := strconv.Atoi(pending[4])
		if c.t0 < 0 {
			c.t0 = tm
		}
		c.sample(cpu, pid, tid, tm, chain)
		pending, chain = nil, nil
	}
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, "PERF_RECORD_") {
			if m := perfChain.FindStringSubmatch(line); m != nil && pending != nil {
				a, _ := strconv.ParseUint(m[1], 16, 64)
				chain = append(chain, a)
			}
			continue
		}
		flushSample()
		if m := perfSample.FindStringSubmatch(line); m != nil {
			pending = m
			size, _ := strconv.ParseUint(line[strings.Index(line, "[0x")+3:strings.Index(line, "]")], 16, 64)
			sampleBytes += int(size)
		} else if m := perfMmap.FindStringSubmatch(line); m != nil {
			c.mmap(m)
		} else if m := perfComm.FindStringSubmatch(line); m != nil {
			pid, _ := strconv.Atoi(m[2])
			tid, _ := strconv.Atoi(m[3])
			if strings.Contains(line, "exec:") {
				c.maps[pid], c.dirty[pid] = nil, true
			}
			c.threads[tid] = m[1]
			if pid == tid {
				c.comms[pid] = m[1]
			}
		} else if m := perfFork.FindStringSubmatch(line); m != nil {
			pid, _ := strconv.Atoi(m[1])
			ppid, _ := strconv.Atoi(m[2])
			if pid != ppid {
				c.maps[pid], c.dirty[pid], c.comms[pid] = c.maps[ppid], true, c.comms[ppid]
			}
		}
	}
	flushSample()
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return sampleBytes
}

func readBuildIDs(t *testing.T, name string) map[string][]byte {
	ids := map[string][]byte{}
	if name == "" {
		return ids
	}
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		id, path, ok := strings.Cut(line, " ")
		if b, err := hex.DecodeString(id); ok && err == nil {
			ids[strings.TrimSpace(path)] = b
		}
	}
	return ids
}

// summaryText is the golden form of a recording's summary.
func summaryText(s *Summary, size int64) string {
	return fmt.Sprintf("bytes %d\nchunks %d\nsamples %d\nlost %d\nstacks %d\nprocesses %d\nimages %d\nduration %v\nclosed %v\n",
		size, s.Chunks, s.Samples, s.Lost, s.Stacks, s.Processes, s.Images, s.Duration(), s.End != nil)
}

// TestPerfFixture checks the committed recording of real samples against
// its golden summary, and with -perfdump rebuilds both from perf's output.
func TestPerfFixture(t *testing.T) {
	if *perfDump != "" {
		dump, err := os.Open(*perfDump)
		if err != nil {
			t.Fatal(err)
		}
		defer dump.Close()
		var out bytes.Buffer
		perfBytes := convertPerfDump(t, dump, readBuildIDs(t, *buildIDs), &out)
		if err := os.WriteFile(fixture, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("perf sample records: %d bytes; recording: %d bytes", perfBytes, out.Len())
	}
	data, err := os.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Summarize(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if s.Damaged != 0 || s.End == nil || s.Samples == 0 {
		t.Fatalf("fixture damaged or empty: %+v", s)
	}
	got := summaryText(s, int64(len(data)))
	if *update || *perfDump != "" {
		if err := os.WriteFile(fixtureGolden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(fixtureGolden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("summary\n%s\nwant (%s)\n%s", got, fixtureGolden, want)
	}
	// Every stack of every batch decodes.
	_, samples, _, _, err := readAll(t, data)
	if err != io.EOF || uint64(len(samples)) != s.Samples {
		t.Errorf("read %d samples, %v", len(samples), err)
	}
}
