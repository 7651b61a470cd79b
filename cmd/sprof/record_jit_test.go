package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sprof/sprof/bpf"
	"github.com/sprof/sprof/internal/testenv"
)

// These tests profile real JIT compilers: Node and the JVM generate their
// hot code into anonymous memory and name it only in the perf maps and
// jitdumps they write for perf. The fixtures are in testdata/jit.

// startJIT starts a runtime running a fixture in dir and returns once the
// fixture says its hot function is compiled.
func startJIT(t *testing.T, dir, bin string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		os.Remove(fmt.Sprintf("/tmp/perf-%d.map", cmd.Process.Pid))
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("%s %v: read %q, %v; want ready", bin, args, line, err)
	}
	go io.Copy(io.Discard, out)
	return cmd
}

// checkJIT runs `sprof record` at 499 Hz with args into out (a profile,
// or a recording that is then reported) and checks it (checkJITProfile).
func checkJIT(t *testing.T, out, comm, fn string, args ...string) {
	t.Helper()
	code, _, errs := runSprof(append([]string{"record", "-F", "499", "-o", out}, args...)...)
	if code != 0 {
		t.Fatalf("sprof record: exit %d\n%s", code, errs)
	}
	checkJITProfile(t, out, comm, fn)
}

// checkJITProfile wants fn named in >= 95% of the samples of the threads
// named comm in out (a profile, or a recording that is then reported).
func checkJITProfile(t *testing.T, out, comm, fn string) {
	t.Helper()
	if strings.HasSuffix(out, ".sprof") {
		pb := strings.TrimSuffix(out, ".sprof") + ".pb.gz"
		if code, _, errs := runSprof("report", out, "-o", pb); code != 0 {
			t.Fatalf("sprof report: exit %d\n%s", code, errs)
		}
		out = pb
	}
	share, total := sampleShare(t, parseProfile(t, out), comm, fn, func(fns []string) bool {
		return slices.ContainsFunc(fns, func(name string) bool { return strings.Contains(name, fn) })
	})
	// 2 s of CPU time at 499 Hz is about 1000 samples; 40 make 95% mean
	// something.
	if total < 40 {
		t.Errorf("only %d samples of %s at 499 Hz", total, comm)
	}
	if share < 0.95 {
		t.Errorf("%.2f%% of the samples of %s name %s, want >= 95%%", 100*share, comm, fn)
	}
}

// recordRunning records the process pid for 2 s of its CPU time
// (recordCPU, which kills it) and checks the recording with
// checkJITProfile; flags go to sprof record. The runtime's files are
// removed after a recording is reported.
func recordRunning(t *testing.T, pid int, out, comm, fn string, flags ...string) {
	t.Helper()
	if strings.HasSuffix(out, ".sprof") {
		defer os.Remove(fmt.Sprintf("/tmp/perf-%d.map", pid))
	}
	recordCPU(t, pid, out, flags...)
	checkJITProfile(t, out, comm, fn)
}

// TestRecordNodeJIT: Node spinning in an optimized JavaScript function,
// recorded into a profile and into a recording reported afterwards. With
// a perf map (--perf-basic-prof) the running process is recorded for
// 2 s of its CPU time. Node buffers its jitdump (--perf-prof) in 2 MiB and writes it out
// when the buffer fills or the process exits, so that process spins for
// 2 s of CPU time and is recorded until it exits: sprof reads the dump's
// tail after the exit, from the file it kept open since it saw the
// process map it. Its exit (about 10 samples) is in the recording too.
func TestRecordNodeJIT(t *testing.T) {
	testenv.RequireRoot(t)
	node := testenv.RequireTool(t, "node")
	script, err := filepath.Abs("../../testdata/jit/hot.js")
	if err != nil {
		t.Fatal(err)
	}
	for _, ext := range []string{".pb.gz", ".sprof"} {
		t.Run("perf-basic-prof"+ext, func(t *testing.T) {
			dir := t.TempDir()
			if ext == ".sprof" {
				cmd := startJIT(t, dir, node, "--perf-basic-prof", "--allow-natives-syntax", script, "60")
				recordRunning(t, cmd.Process.Pid, filepath.Join(dir, "cpu"+ext), "node", "hotLoop")
				return
			}
			cache := warmStore(t, node)
			cmd := startJIT(t, dir, node, "--perf-basic-prof", "--allow-natives-syntax", script, "60")
			out := filepath.Join(dir, "cpu"+ext)
			recordRunning(t, cmd.Process.Pid, out, "node", "hotLoop", "--cache-dir", cache)
			checkRoot(t, out, "node", "_start", false)
		})
		t.Run("perf-prof"+ext, func(t *testing.T) {
			dir := t.TempDir() // where node writes jit-PID.dump
			cmd := startJIT(t, dir, node, "--perf-prof", "--allow-natives-syntax", script, "2")
			out := filepath.Join(dir, "cpu"+ext)
			if ext == ".sprof" {
				defer os.Remove(fmt.Sprintf("/tmp/perf-%d.map", cmd.Process.Pid))
			}
			checkJIT(t, out, "node", "hotLoop", "-p", strconv.Itoa(cmd.Process.Pid)) // until it exits
		})
	}
}

// warmStore returns a cache directory whose unwind store holds the tables
// of bins and of the libraries they load, as after an earlier run on the
// host: node's and libjvm's took seconds to build on a loaded CI VM,
// longer than a recording.
func warmStore(t *testing.T, bins ...string) string {
	t.Helper()
	cache := t.TempDir()
	for _, bin := range bins {
		warmUnwindStore(t, cache, bin)
	}
	return cache
}

// checkRoot wants >= 90% of the samples of the threads named comm in the
// profile out to reach root, their thread's outermost frame: the JIT's
// frames lie between the runtime's C++ and libc's thread start, which the
// frame-pointer walk does not reach. The kernel's walk takes JIT code and
// code without CFI by frame pointers (with bpf_loop); with copy, the stack
// copy's unwind resumes the frame-pointer walk where it ends (x86-64). The
// first samples, taken before sprof has described the process to the
// kernel or has libc's table, are partial.
func checkRoot(t *testing.T, out, comm, root string, copy bool) {
	t.Helper()
	if copy && runtime.GOARCH != "amd64" || !copy && !bpf.ProbeFeatures().LoopWalk() {
		return
	}
	share, _ := sampleShare(t, parseProfile(t, out), comm, root+" at the root", func(fns []string) bool {
		return len(fns) > 0 && fns[len(fns)-1] == root
	})
	if share < 0.90 {
		t.Errorf("%.2f%% of the samples of %s reach %s, want >= 90%%", 100*share, comm, root)
	}
}

// TestRecordNodeJITInContainer: Node in its own pid and mount namespaces,
// as in a container, writes /tmp/perf-1.map into a /tmp of its own, which
// only /proc/PID/root reaches; its JIT frames are named all the same. The
// script is copied into that /tmp, which hides a checkout under /tmp.
func TestRecordNodeJITInContainer(t *testing.T) {
	testenv.RequireRoot(t)
	node := testenv.RequireTool(t, "node")
	unshare := testenv.RequireTool(t, "unshare")
	script, err := filepath.Abs("../../testdata/jit/hot.js")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd := startJIT(t, dir, unshare, "--pid", "--fork", "--kill-child", "--mount", "--mount-proc", "sh", "-c",
		`js=$(cat "$1") && mount -t tmpfs tmpfs /tmp && printf '%s\n' "$js" >/tmp/hot.js &&
		exec "$0" --perf-basic-prof --allow-natives-syntax /tmp/hot.js 60`, node, script)
	// unshare forks the namespace's pid 1, which runs node and is
	// killed with unshare.
	children, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(children)))
	if err != nil {
		t.Fatalf("unshare's children: %q", children)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d/root/tmp/perf-1.map", pid)); err != nil {
		t.Fatalf("node's perf map is not in its own /tmp: %v", err)
	}
	recordRunning(t, pid, filepath.Join(dir, "cpu.pb.gz"), "node", "hotLoop")
}

// TestRecordJavaJIT: OpenJDK 17 keeping frame pointers in compiled code,
// its perf map written by jcmd once the hot methods are compiled. The hot
// method runs under javaDepth compiled calls of another, none inlined:
// >= 90% of the samples show every one of them, and with the walk in the
// kernel (or the copy's, resumed) >= 90% reach the thread's root below.
func TestRecordJavaJIT(t *testing.T) {
	testenv.RequireRoot(t)
	java := testenv.RequireTool(t, "java")
	jcmd := testenv.RequireTool(t, "jcmd")
	src, err := filepath.Abs("../../testdata/jit/Hot.java")
	if err != nil {
		t.Fatal(err)
	}
	real, err := filepath.EvalSymlinks(java)
	if err != nil {
		t.Fatal(err)
	}
	libjvm := filepath.Join(filepath.Dir(filepath.Dir(real)), "lib", "server", "libjvm.so") // loaded by dlopen: no ldd
	// The stack copy: the frame-pointer walk through the Java frames,
	// resumed by libc's table (collector/unwind_resume.go).
	for _, name := range []string{".pb.gz", ".pb.gz/copy", ".sprof"} {
		t.Run(name, func(t *testing.T) {
			ext, unwinding, _ := strings.Cut(name, "/")
			var flags []string
			if ext == ".pb.gz" {
				flags = []string{"--cache-dir", warmStore(t, real, libjvm)}
			}
			if unwinding != "" {
				flags = append(flags, "--unwind", unwinding)
			}
			dir := t.TempDir()
			cmd := startJIT(t, dir, java, "-XX:+PreserveFramePointer", "-Xbatch", "-XX:CompileCommand=quiet",
				"-XX:CompileCommand=dontinline,Hot::*", src, "60", strconv.Itoa(javaDepth))
			pid := cmd.Process.Pid
			if out, err := exec.Command(jcmd, strconv.Itoa(pid), "Compiler.perfmap").CombinedOutput(); err != nil {
				t.Fatalf("jcmd %d Compiler.perfmap: %v\n%s", pid, err, out)
			}
			out := filepath.Join(dir, "cpu"+ext)
			recordRunning(t, pid, out, "java", "Hot.spin", flags...)
			if ext == ".sprof" {
				out = strings.TrimSuffix(out, ext) + ".pb.gz" // checkJITProfile's report
			}
			share, _ := sampleShare(t, parseProfile(t, out), "java", fmt.Sprintf("%d calls of Hot.down", javaDepth+1), func(fns []string) bool {
				return slices.ContainsFunc(fns, func(fn string) bool { return strings.Contains(fn, "Hot.spin") }) &&
					countFunc(fns, func(fn string) bool { return strings.Contains(fn, "Hot.down") }) == javaDepth+1
			})
			if share < 0.90 {
				t.Errorf("%.2f%% of the samples of java show Hot.spin under its %d calls of Hot.down, want >= 90%%", 100*share, javaDepth+1)
			}
			if ext == ".pb.gz" {
				checkRoot(t, out, "java", "clone3", unwinding == "copy") // the thread the launcher starts
			}
		})
	}
}

// javaDepth is how deep testdata/jit/Hot.java recurses through compiled
// frames (Hot.down) into the hot method (Hot.spin).
const javaDepth = 12

// countFunc counts the elements of s that f reports.
func countFunc[E any](s []E, f func(E) bool) int {
	n := 0
	for _, e := range s {
		if f(e) {
			n++
		}
	}
	return n
}
