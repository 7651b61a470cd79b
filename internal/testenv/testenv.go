// Package testenv decides whether a test that needs something of the
// machine — root, BPF, a tool — runs here. On a developer's machine such a
// test skips with the reason; under CI=true, where the CI machine is known to
// have everything, it fails instead, so a missing capability cannot turn a
// red run green.
package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// InCI reports whether the tests run under CI (CI=true).
func InCI() bool { return os.Getenv("CI") == "true" }

// Unavailable skips t with reason, or fails it under CI.
func Unavailable(t testing.TB, reason string) {
	t.Helper()
	if InCI() {
		t.Fatalf("CI=true but %s", reason)
	}
	t.Skip(reason)
}

// RequireRoot stops t unless it runs as root, which loading BPF programs
// and opening system-wide perf events need.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Unavailable(t, "this test needs root (BPF programs, system-wide perf events)")
	}
}

// RequireTool returns the path of an external program the test uses as an
// oracle, stopping t when it is not installed.
func RequireTool(t testing.TB, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		Unavailable(t, name+" is not installed (make test installs it)")
	}
	return path
}

// Go119 returns the GOROOT of Debian's Go 1.19 (golang-1.19-go), whose
// programs' function tables have Go 1.18's layout, stopping t when it is
// not installed. Its go command needs GOROOT set to it: the environment's
// may be the running toolchain's.
func Go119(t testing.TB) (goroot string) {
	t.Helper()
	const root = "/usr/lib/go-1.19"
	if _, err := os.Stat(filepath.Join(root, "bin", "go")); err != nil {
		Unavailable(t, "Go 1.19 is not installed at "+root+" (make test installs golang-1.19-go)")
	}
	return root
}

// UnprivilegedCopy returns a copy of the running test binary that any user
// may run, in a directory any user may enter and write, removed when t
// ends, for a test that reruns itself as nobody (setpriv): the test binary
// itself may lie under a directory only root can enter.
func UnprivilegedCopy(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sprof-unprivileged")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, filepath.Base(os.Args[0]))
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// EmulatedCPU reports whether the tests run on a CPU emulated in software:
// the kernel matrix's VMs (scripts/kernel-matrix.sh) run under QEMU's TCG,
// which their /init says with SPROF_EMULATED_CPU=tcg.
func EmulatedCPU() bool { return os.Getenv("SPROF_EMULATED_CPU") != "" }

// SkipOnEmulatedCPU skips t on an emulated CPU, where it cannot pass for
// the reason given: TCG delivers interrupts only between translated blocks
// of guest code, never on each instruction, and does not sustain high
// sampling rates on every virtual CPU. Unlike Unavailable, it skips under
// CI too: no CI machine can change what the emulator does.
func SkipOnEmulatedCPU(t testing.TB, why string) {
	t.Helper()
	if EmulatedCPU() {
		t.Skipf("emulated CPU (SPROF_EMULATED_CPU=%s): %s", os.Getenv("SPROF_EMULATED_CPU"), why)
	}
}
