package bpf

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/sprof/sprof/internal/proctime"
	"github.com/sprof/sprof/internal/testenv"
)

// The fixtures: x86-64 builds in testdata/bpf, aarch64 builds of the same
// sources under the same names in testdata/bpf/arm64.
var (
	fixturePath = fixtureDir() + "/fpwalk"
	nofpPath    = fixtureDir() + "/nofp" // built without frame pointers
	offCPUPath  = fixtureDir() + "/offcpu"
)

func fixtureDir() string {
	if runtime.GOARCH == "arm64" {
		return "../testdata/bpf/arm64"
	}
	return "../testdata/bpf"
}

// requireBPF skips tests that need root and BPF, or fails them under CI.
func requireBPF(t testing.TB) {
	t.Helper()
	testenv.RequireRoot(t)
}

// requireFixture skips where no fixture build can run.
func requireFixture(t testing.TB) {
	t.Helper()
	requireBPF(t)
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		t.Skipf("the fixtures are x86-64 and aarch64 code; GOARCH is %s", runtime.GOARCH)
	}
}

// startFixture runs the fixture in a mode and kills it when the test ends.
func startFixture(t testing.TB, args ...string) (*exec.Cmd, io.WriteCloser) {
	t.Helper()
	return startBinary(t, fixturePath, args...)
}

func startBinary(t testing.TB, path string, args ...string) (*exec.Cmd, io.WriteCloser) {
	t.Helper()
	cmd := exec.Command(path, args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start fixture: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd, stdin
}

func openSampler(t testing.TB, cfg Config) *Sampler {
	t.Helper()
	s := loadSampler(t, cfg)
	if err := s.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	return s
}

// loadSampler loads a Sampler for cfg that samples nothing until Start,
// closed when t ends.
func loadSampler(t testing.TB, cfg Config) *Sampler {
	t.Helper()
	s, err := Load(cfg)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// sampleCopy is a Sample that outlives Read's callback.
type sampleCopy struct {
	Sample
	user, kernel []uint64
	stack        []byte // StackCopy; nil when the sample has none
}

// collect reads the sampler every 50 ms for d and returns copies of the
// samples keep selects.
func collect(t testing.TB, s *Sampler, d time.Duration, keep func(*Sample) bool) []sampleCopy {
	t.Helper()
	var out []sampleCopy
	read := func() {
		if _, err := s.Read(func(x *Sample) {
			if keep(x) {
				c := sampleCopy{Sample: *x, user: append([]uint64(nil), x.User...), kernel: append([]uint64(nil), x.Kernel...)}
				c.Python = append([]uint64(nil), x.Python...)
				if x.StackCopy != nil {
					c.stack = append([]byte{}, x.StackCopy...)
				}
				out = append(out, c)
			}
		}); err != nil {
			t.Fatalf("Read: %v", err)
		}
	}
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		read()
	}
	read()
	return out
}

// collectN reads the sampler in 250 ms steps until keep has selected n
// samples, or the processes of its pid filter have run 10 s of CPU time
// between them (several thousand samples at the tests' rates), however
// long a loaded host takes to give them that. It returns what keep
// selected.
func collectN(t testing.TB, s *Sampler, n int, keep func(*Sample) bool) []sampleCopy {
	t.Helper()
	return collectUntil(t, s, 10*time.Second, keep, func(got []sampleCopy) bool { return len(got) >= n })
}

// collectCPU reads the sampler in 250 ms steps while the processes of its
// pid filter run d of CPU time between them, however long a loaded host
// takes to give them that, and returns copies of the samples keep
// selects.
func collectCPU(t testing.TB, s *Sampler, d time.Duration, keep func(*Sample) bool) []sampleCopy {
	t.Helper()
	return collectUntil(t, s, d, keep, func([]sampleCopy) bool { return false })
}

// collectUntil reads the sampler in 250 ms steps until enough says what
// keep selected is enough, or the processes of its pid filter have run
// budget of CPU time between them, and returns what keep selected.
func collectUntil(t testing.TB, s *Sampler, budget time.Duration, keep func(*Sample) bool, enough func([]sampleCopy) bool) []sampleCopy {
	t.Helper()
	var got []sampleCopy
	start, _ := filterCPU(t, s)
	for !enough(got) {
		got = append(got, collect(t, s, 250*time.Millisecond, keep)...)
		if ran, running := filterCPU(t, s); !running || ran-start >= budget {
			break
		}
	}
	return got
}

// filterCPU returns the CPU time the processes of s's pid filter have run
// between them, and whether any of them runs still. Samples are taken in
// the filtered processes' CPU time, which a loaded host gives them a
// fraction of the wall clock's.
func filterCPU(t testing.TB, s *Sampler) (ran time.Duration, running bool) {
	t.Helper()
	if s.pids == nil {
		t.Fatal("the test's sampler has no pid filter: its samples cannot be awaited by CPU time")
	}
	for pid, in := range s.pids.mem {
		if in == 0 {
			continue
		}
		if d, err := proctime.CPU(pid); err == nil {
			ran, running = ran+d, true
		}
	}
	return ran, running
}

func ofPid(pid int) func(*Sample) bool {
	return func(x *Sample) bool { return x.Pid == uint32(pid) }
}

// fixtureELF gives the addresses the walker must produce, read from the
// fixture binary (linked -no-pie, so link-time addresses are run-time ones).
type fixtureELF struct {
	syms map[string]elf.Symbol
	text *elf.Section
}

func loadFixtureELF(t testing.TB) *fixtureELF {
	t.Helper()
	return loadELF(t, fixturePath)
}

func loadELF(t testing.TB, path string) *fixtureELF {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	fx := &fixtureELF{syms: map[string]elf.Symbol{}, text: f.Section(".text")}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			fx.syms[s.Name] = s
		}
	}
	return fx
}

// inFixture selects the fixture's samples taken in its own code, not in
// ld.so or libc while it starts.
func (fx *fixtureELF) inFixture(pid int) func(*Sample) bool {
	return func(x *Sample) bool {
		return x.Pid == uint32(pid) && x.PC >= fx.text.Addr && x.PC < fx.text.Addr+fx.text.Size
	}
}

func (fx *fixtureELF) contains(fn string, pc uint64) bool {
	s := fx.syms[fn]
	return pc >= s.Value && pc < s.Value+s.Size
}

// returnAfterCall finds the direct call in caller that targets callee and
// returns the address after it: the return address a walk must report.
func (fx *fixtureELF) returnAfterCall(t testing.TB, caller, callee string) uint64 {
	t.Helper()
	for _, c := range fx.calls(t, caller) {
		if c.target == fx.syms[callee].Value {
			return c.ret
		}
	}
	t.Fatalf("no call from %s to %s in the fixture", caller, callee)
	return 0
}

type call struct{ target, ret uint64 }

// calls lists the direct calls in fn: x86-64 `call rel32` (found by their
// target landing inside .text or the PLT just below it, which rules out e8
// bytes inside other instructions) or aarch64 `bl`.
func (fx *fixtureELF) calls(t testing.TB, fn string) []call {
	t.Helper()
	from := fx.syms[fn]
	code := make([]byte, from.Size)
	if _, err := fx.text.ReadAt(code, int64(from.Value-fx.text.Addr)); err != nil {
		t.Fatal(err)
	}
	var out []call
	if runtime.GOARCH == "arm64" {
		for i := 0; i+4 <= len(code); i += 4 {
			insn := binary.LittleEndian.Uint32(code[i:])
			if insn&0xfc000000 == 0x94000000 { // bl imm26
				at := from.Value + uint64(i)
				out = append(out, call{at + uint64(int64(int32(insn<<6)>>6)*4), at + 4})
			}
		}
		return out
	}
	for i := 0; i+5 <= len(code); i++ {
		next := from.Value + uint64(i) + 5
		target := next + uint64(int64(int32(binary.LittleEndian.Uint32(code[i+1:]))))
		if code[i] == 0xe8 && target >= fx.text.Addr-0x1000 && target < fx.text.Addr+fx.text.Size {
			out = append(out, call{target, next})
		}
	}
	return out
}

func hexFrames(fr []uint64) string {
	s := "["
	for i, a := range fr {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%#x", a)
	}
	return s + "]"
}

// killForgotten checks that pid is in a pid set (in says whether it is),
// kills the process and waits for the exit hook to take it out.
func killForgotten(t testing.TB, in func(pid uint32) (bool, error), pid uint32) {
	t.Helper()
	if ok, err := in(pid); !ok || err != nil {
		t.Fatalf("pid %d not in the set (%v)", pid, err)
	}
	if err := syscall.Kill(int(pid), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ok, err := in(pid)
		if !ok && err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still in the set after it exited (%v)", pid, err)
		}
	}
}

// copyMarked is killForgotten's in for the copy marks (SetCopy).
func (p *pidBytes) copyMarked(pid uint32) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mem[pid]&byte(markCopy) != 0, nil
}

// inFilter is killForgotten's in for the pid filter.
func (p *pidBytes) inFilter(pid uint32) (bool, error) {
	return p.mem[pid] != 0, nil
}

// waitLost waits for the sampler to lose a sample, while the processes of
// its pid filter run 5 s of CPU time between them at most, and returns
// how many it lost.
func waitLost(t testing.TB, s *Sampler) uint64 {
	t.Helper()
	var lost uint64
	waitSampled(t, s, 5*time.Second, func() bool {
		var err error
		if lost, err = s.Lost(); err != nil {
			t.Fatal(err)
		}
		return lost > 0
	})
	return lost
}

// waitSampled checks cond every 100 ms until it holds, or the processes
// of s's pid filter have run budget of CPU time between them, or none
// runs any more, however long a loaded host takes to run them.
func waitSampled(t testing.TB, s *Sampler, budget time.Duration, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	start, _ := filterCPU(t, s)
	for !cond() {
		if ran, running := filterCPU(t, s); !running || ran-start >= budget {
			return
		}
		<-tick.C
	}
}

// waitCPUTime returns once process pid has run for d, so a test samples
// it in its steady state rather than in ld.so.
func waitCPUTime(t testing.TB, pid int, d time.Duration) {
	t.Helper()
	proctime.Until(t, pid, d, fmt.Sprintf("pid %d to have run %v", pid, d), func() bool {
		ran, err := proctime.CPU(pid)
		return err == nil && ran >= d
	})
}

// kernelPaths are the sampler's paths: the one this kernel's features
// choose, and those of kernels without the optional features, forced here
// so that every path runs on this host (the kernel matrix runs them on the
// kernels themselves).
var kernelPaths = []struct {
	name    string
	without []Feature // pretended missing
}{
	{"probed", nil},
	{"5.10", []Feature{FeatureCurrentTaskBTF, FeatureAncestorCgroupID, FeatureTaskPtRegs, FeatureLoop, FeatureFindVMA}},
}

// pathFeatures are the features a Config gets for a kernel path: nil,
// probed by Open, when it pretends nothing.
func pathFeatures(without []Feature) *Features {
	if len(without) == 0 {
		return nil
	}
	return ProbeFeatures().without(without...)
}

// batchings are the values of Config.batchedSteps a test runs a kernel
// path with: both where the path walks through bpf_loop's callbacks, which
// batched_steps is for (the path this kernel chooses, features nil), and
// one step a call elsewhere.
func batchings(features *Features) []bool {
	if features == nil && ProbeFeatures().LoopWalk() {
		return []bool{false, true}
	}
	return []bool{false}
}

// onEveryPath runs test once per kernel path, as a subtest; test puts
// features into its Config. Under emulation, in the kernel matrix, only
// the path the kernel chooses itself runs ("probed"): the matrix is there
// to run each kernel's own path on that kernel (5.10's on 5.10), and the
// forced paths of older kernels, which the host runs, would double its
// time.
func onEveryPath(t *testing.T, test func(t *testing.T, features *Features)) {
	t.Helper()
	for _, p := range kernelPaths {
		if testenv.EmulatedCPU() && len(p.without) > 0 {
			continue
		}
		t.Run(p.name, func(t *testing.T) { test(t, pathFeatures(p.without)) })
	}
}
