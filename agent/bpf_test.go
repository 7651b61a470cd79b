package agent

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/sprof/sprof/internal/proctime"
	"github.com/sprof/sprof/internal/testenv"
	"github.com/sprof/sprof/pipeline"
	"github.com/sprof/sprof/symbolize"
)

// TestBPFAgent runs the real agent — BPF sampler, collector, symbolizer —
// for three intervals against a local Pyroscope, with a busy process to
// find in its profiles.
func TestBPFAgent(t *testing.T) {
	testenv.RequireRoot(t)
	sh, err := os.ReadFile("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	busy := filepath.Join(t.TempDir(), "sprofbusy")
	if err := os.WriteFile(busy, sh, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(busy, "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()

	sym := &sweepCounter{ELF: symbolize.NewELF(symbolize.Options{})}
	rec, err := OpenBPF(pipeline.Config{Frequency: 99, User: true, Kernel: true, StackCopy: pipeline.DefaultStackCopy, Symbolizer: sym})
	if err != nil {
		t.Fatal(err)
	}
	// A cleanup, not a defer: cleanups run after the test function, in
	// reverse order, so the agent that start's cleanup stops is stopped
	// before its sampler is closed under it, also when the test fails.
	t.Cleanup(func() { rec.Close() })
	srv := newFakePyroscope(t)
	a, err := New(rec, Config{Interval: 500 * time.Millisecond, Pyroscope: pyroscopeConfig(srv.url()), FlushTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	const label = "__name__=process_cpu,env=prod,host=node-1,service_name=sprofbusy"
	busyPushes := func() []push {
		var out []push
		for _, p := range srv.received() {
			if p.labels == label {
				out = append(out, p)
			}
		}
		return out
	}
	stop := start(t, a)
	// Intervals come late on a loaded host: the agent's drains, cuts and
	// naming wait for CPU like everything else. On an idle host three
	// intervals take 1.5 s of sprofbusy's CPU time; a loaded one gives the
	// agent about as much CPU as sprofbusy.
	proctime.Until(t, cmd.Process.Pid, 30*time.Second, "three intervals of sprofbusy", func() bool { return len(busyPushes()) >= 3 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	var samples int64
	for i, p := range busyPushes() {
		n := total(p.profile)
		samples += n
		found := false
		for _, m := range p.profile.Mapping {
			found = found || m.File == busy
		}
		// A sliver of an interval (a late cut) may hold a sample or
		// two in libc or the kernel only; a real one has the binary.
		if !found && n >= 10 {
			t.Errorf("profile %d of sprofbusy, %d samples, has no mapping of %s", i, n, busy)
		}
		t.Logf("interval %d: %d samples over %v", i, n, time.Duration(p.profile.DurationNanos))
	}
	m, d := &a.metrics, a.deliveries[0]
	if samples == 0 || m.samples.Load() < uint64(samples) || d.sentOK.Load() < 3 {
		t.Errorf("%d samples of sprofbusy, %d in all, %d pushes", samples, m.samples.Load(), d.sentOK.Load())
	}
	cs := rec.SymbolizerStats().Cache
	if cs == nil || cs.Misses == 0 {
		t.Fatalf("the symbolizer read no binary: %+v", cs)
	}
	// Every interval cut is resolved once, and swept: those named, and
	// those dropped because naming fell behind (a loaded host's), plus
	// the one still being named if Run gave up on it at FlushTimeout.
	if n, i := sym.sweeps.Load(), m.intervals.Load()+m.skipped.Load(); n < 3 || n < i || n > i+1 {
		t.Errorf("the symbolizer's cache was swept %d times in %d intervals (%d dropped); want once an interval", n, i, m.skipped.Load())
	}
	t.Logf("%d intervals, %d samples, %d lost, %d pushes, %d bytes; symbolizer cache %+v",
		m.intervals.Load(), m.samples.Load(), m.lost.Load(), d.sentOK.Load(), d.sender.sentBytes(), *cs)
}

// sweepCounter is an ELF symbolizer counting the agent's sweeps.
type sweepCounter struct {
	*symbolize.ELF
	sweeps atomic.Uint64
}

func (s *sweepCounter) Sweep() {
	s.sweeps.Add(1)
	s.ELF.Sweep()
}

// inlspin is a C program built at -O2 with DWARF (scripts/agent-fixtures.sh)
// that spins in spin, whose hot loop is mix inlined into step inlined into
// spin.
const inlspin = "../testdata/agent/inlspin"

// TestBPFAgentInline runs the real agent with each symbolizer while
// inlspin spins, writes its profiles to a directory and compares every
// location in inlspin — function, file and line of each inline level,
// innermost first — with llvm-symbolizer's answer for the same address.
func TestBPFAgentInline(t *testing.T) {
	testenv.RequireRoot(t)
	llvm := testenv.RequireTool(t, "llvm-symbolizer-22")
	code, err := os.ReadFile(inlspin)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "sprofinl")
	if err := os.WriteFile(bin, code, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	for _, kind := range []string{"gsym", "elf"} {
		t.Run(kind, func(t *testing.T) {
			var sym symbolize.Symbolizer = symbolize.NewELF(symbolize.Options{})
			if kind == "gsym" {
				g, err := symbolize.NewGSYM(symbolize.GSYMOptions{CacheDir: t.TempDir()})
				if err != nil {
					t.Fatal(err)
				}
				sym = g
			}
			rec, _, dir, stop := startBPFAgent(t, pipeline.Config{Frequency: 99, User: true, StackCopy: pipeline.DefaultStackCopy, Symbolizer: sym})
			var files []string
			// Two intervals of 1 s take 2 s of sprofinl's CPU time on an
			// idle host; a loaded one gives the agent, naming them, about
			// as much CPU as sprofinl.
			proctime.Until(t, cmd.Process.Pid, 30*time.Second, "two profiles of sprofinl", func() bool {
				files, _ = filepath.Glob(filepath.Join(dir, "*_sprofinl.pb.gz"))
				return len(files) >= 2
			})
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			inline := 0
			for _, f := range files {
				inline += checkAgainstLLVM(t, llvm, bin, readPprof(t, f))
			}
			t.Logf("%d profiles, %d locations of mix in step in spin", len(files), inline)
			if inline == 0 {
				t.Errorf("no location of sprofinl in %d profiles has the inline levels mix, step, spin", len(files))
			}
			st := rec.SymbolizerStats()
			if (kind == "gsym") != (st.GSYM != nil && st.GSYM.Converted > 0) {
				t.Errorf("--symbolizer %s: GSYM stats %+v", kind, st.GSYM)
			}
			if st.Cache == nil || st.Cache.Misses == 0 {
				t.Errorf("--symbolizer %s: cache stats %+v; want its misses counted", kind, st.Cache)
			}
		})
	}
}

// checkAgainstLLVM compares the frames of every location of p in bin with
// llvm-symbolizer's, and returns how many locations have the three levels
// mix, step and spin.
func checkAgainstLLVM(t *testing.T, llvm, bin string, p *profile.Profile) int {
	t.Helper()
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	// A return address is looked up one byte back, in its call.
	caller := map[*profile.Location]bool{}
	for _, s := range p.Sample {
		for _, l := range s.Location[1:] {
			caller[l] = true
		}
	}
	var locs []*profile.Location
	var args []string
	for _, l := range p.Location {
		m := l.Mapping
		if m == nil || m.File != bin {
			continue
		}
		off := l.Address - m.Start + m.Offset
		if caller[l] {
			off--
		}
		vaddr, ok := fileVaddr(ef, off)
		if !ok {
			t.Fatalf("0x%x (file offset 0x%x) is in no PT_LOAD of %s", l.Address, off, bin)
		}
		if inPLT(ef, vaddr) {
			// A sample in a PLT stub (spin calls clock_gettime through
			// one): no symbol covers it, and llvm-symbolizer answers with
			// the one before, _init, which ends before the PLT.
			continue
		}
		locs = append(locs, l)
		args = append(args, fmt.Sprintf("0x%x", vaddr))
	}
	if len(locs) == 0 {
		t.Fatalf("a profile of sprofinl without a location in %s", bin)
	}
	if m := locs[0].Mapping; !m.HasFunctions || !m.HasFilenames || !m.HasLineNumbers || !m.HasInlineFrames {
		t.Errorf("mapping of %s: %+v", bin, m)
	}
	out, err := exec.Command(llvm, append([]string{"--inlining", "--no-demangle", "--obj=" + bin}, args...)...).Output()
	if err != nil {
		t.Fatalf("llvm-symbolizer: %v", err)
	}
	blocks := strings.Split(strings.TrimSpace(string(out)), "\n\n")
	if len(blocks) != len(locs) {
		t.Fatalf("llvm-symbolizer answered %d addresses of %d:\n%s", len(blocks), len(locs), out)
	}
	inline := 0
	for i, l := range locs {
		// Function and file:line:column lines, innermost first.
		var want, got []string
		lines := strings.Split(blocks[i], "\n")
		for j := 0; j+1 < len(lines); j += 2 {
			// llvm-symbolizer writes ?? for a function without a file
			// (crt1's _start), which sprof leaves empty.
			file := strings.TrimPrefix(lines[j+1][:strings.LastIndexByte(lines[j+1], ':')], "??")
			want = append(want, lines[j]+" "+file)
		}
		var names []string
		for _, ln := range l.Line {
			got = append(got, fmt.Sprintf("%s %s:%d", ln.Function.Name, ln.Function.Filename, ln.Line))
			names = append(names, ln.Function.Name)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: %q; llvm-symbolizer says %q", args[i], got, want)
		}
		if slices.Equal(names, []string{"mix", "step", "spin"}) {
			inline++
		}
	}
	return inline
}

// fileVaddr returns the virtual address at file offset off of ef.
func fileVaddr(ef *elf.File, off uint64) (uint64, bool) {
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD && off >= p.Off && off < p.Off+p.Filesz {
			return off - p.Off + p.Vaddr, true
		}
	}
	return 0, false
}

// inPLT says whether the address vaddr of f lies in one of its PLT
// sections.
func inPLT(f *elf.File, vaddr uint64) bool {
	for _, name := range []string{".plt", ".plt.sec", ".plt.got"} {
		if sec := f.Section(name); sec != nil && vaddr >= sec.Addr && vaddr < sec.Addr+sec.Size {
			return true
		}
	}
	return false
}

// startBPFAgent opens the real sampler with cfg and runs an agent over it
// that writes a profile per 1 s interval into dir, until stop or the end
// of the test.
func startBPFAgent(t *testing.T, cfg pipeline.Config) (rec *BPF, a *Agent, dir string, stop func() error) {
	t.Helper()
	rec, err := OpenBPF(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.Close() })
	dir = t.TempDir()
	a, err = New(rec, Config{Interval: time.Second, OutputDir: dir, FlushTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return rec, a, dir, start(t, a)
}
