package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"

	"github.com/sprof/sprof/bpf"
	"github.com/sprof/sprof/internal/testenv"
)

// checkLineRE is the shape of every line `sprof check` prints but the last.
var checkLineRE = regexp.MustCompile(`^(ok  |warn|fail|skip) ([^:]+): (.+)$`)

// parseCheck splits check's output into its item lines, by item, in order,
// and its last line when that is no item line ("sprof can record here");
// every other line must have the shape and a unique item.
func parseCheck(t *testing.T, out string) (map[string]checkLine, []string, string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	byItem := map[string]checkLine{}
	var order []string
	for i, l := range lines {
		m := checkLineRE.FindStringSubmatch(l)
		if m == nil && i == len(lines)-1 {
			return byItem, order, l
		}
		if m == nil {
			t.Fatalf("line %q is not STATUS ITEM: DETAIL", l)
		}
		if _, dup := byItem[m[2]]; dup {
			t.Fatalf("item %q twice", m[2])
		}
		detail, fix, _ := strings.Cut(m[3], "; fix: ")
		byItem[m[2]] = checkLine{m[1], m[2], detail, fix}
		order = append(order, m[2])
	}
	return byItem, order, ""
}

// toolOutput runs an oracle tool and returns its output, trimmed.
func toolOutput(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(testenv.RequireTool(t, name), args...).Output()
	if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return strings.TrimSpace(string(out))
}

// procCapEff reads the effective capabilities as /proc/self/status prints
// them, a second way to the set check gets from capget(2).
func procCapEff(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if hex, ok := strings.CutPrefix(l, "CapEff:\t"); ok {
			v, err := strconv.ParseUint(hex, 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatal("no CapEff in /proc/self/status")
	return 0
}

// writeCache fills a cache directory with files of known sizes: 3 files,
// 3,048 bytes.
func writeCache(t *testing.T, dir string) {
	t.Helper()
	for name, n := range map[string]int{"gsym/a.gsym": 1000, "gsym/b.gsym": 2000, ".build-id/ab/cd.debug": 48} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, make([]byte, n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// checkWant is what one line of `sprof check` must say: its status, a
// part of its detail and of its fix.
type checkWant struct {
	item, status, detail, fix string
}

// checkUser is who runs `sprof check` in a test, root or nobody without
// capabilities, and what it is given: cacheDetail is what its GSYM cache
// line must say, debuginfod its DEBUGINFOD_URLS.
type checkUser struct {
	root                    bool
	cacheDetail, debuginfod string
}

// mountPoints returns where file systems of type fstype are mounted, from
// /proc/self/mounts (check reads mountinfo), each confirmed by statfs(2)
// to be of that type's magic.
func mountPoints(t *testing.T, fstype string, magic int64) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	var points []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 3 || f[2] != fstype {
			continue
		}
		point := strings.ReplaceAll(f[1], `\040`, " ")
		var st unix.Statfs_t
		if err := unix.Statfs(point, &st); err != nil || int64(st.Type) != magic {
			t.Fatalf("/proc/self/mounts has %s at %s, statfs says type %#x (%v)", fstype, point, st.Type, err)
		}
		points = append(points, point)
	}
	return points
}

// kernelBTF reads the magic number that starts every BTF blob from the
// kernel's own, so the BTF line is held to the file's content, not only
// to its presence.
func kernelBTF(t *testing.T) bool {
	t.Helper()
	f, err := os.Open("/sys/kernel/btf/vmlinux")
	if err != nil {
		return false
	}
	defer f.Close()
	var magic [2]byte
	if _, err := io.ReadFull(f, magic[:]); err != nil {
		t.Fatalf("/sys/kernel/btf/vmlinux: %v", err)
	}
	return magic == [2]byte{0x9f, 0xeb} // 0xeB9F, little-endian as on amd64 and arm64
}

// sysctl reads kernel.NAME with the sysctl tool (busybox's in the kernel
// VMs), not through /proc/sys as check does.
func sysctl(t *testing.T, name string) int {
	t.Helper()
	v, err := strconv.Atoi(toolOutput(t, "sysctl", "-n", "kernel."+name))
	if err != nil {
		t.Fatalf("sysctl kernel.%s: %v", name, err)
	}
	return v
}

// offCPUBTF says whether the kernel has what --off-cpu attaches to and
// calls: the sched_switch and sys_exit tracepoints in its BTF, and
// bpf_get_task_stack, which Linux 5.9 brought.
func offCPUBTF(t *testing.T, release string) bool {
	t.Helper()
	spec, err := btf.LoadKernelSpec()
	if err != nil || !kernelAtLeast(release, 5, 9) {
		return false
	}
	for _, name := range []string{"btf_trace_sched_switch", "btf_trace_sys_exit"} {
		if _, err := spec.AnyTypeByName(name); err != nil {
			return false
		}
	}
	return true
}

// wantCheck derives every line `sprof check` must print for u on this
// host, in order, from what the test finds itself: uname, the
// capabilities in /proc/self/status, the sysctl tool, /proc/self/mounts
// with statfs, the kernel's BTF, the kernel version against the release
// that brought each BPF feature, and the cache the test wrote. Features a
// kernel predates are held to bpf.ProbeFeatures, which bpf's tests hold to
// bpftool; distributions backport features, never remove them.
func wantCheck(t *testing.T, u checkUser) []checkWant {
	t.Helper()
	release, machine := toolOutput(t, "uname", "-r"), toolOutput(t, "uname", "-m")
	want := []checkWant{{"kernel", statusOK, "Linux " + release + " on " + machine, ""}}
	var caps uint64
	var feats *bpf.Features
	if u.root {
		caps = procCapEff(t)
		want = append(want, checkWant{"privileges", statusOK, "root: may load BPF programs", ""})
		before := len(want)
		for _, c := range optionalCaps {
			if caps&(1<<c.cap) == 0 && !(c.cap == unix.CAP_SYS_RESOURCE && kernelAtLeast(release, 5, 11)) {
				want = append(want, checkWant{c.name, statusWarn, "missing: ", "grant it to sprof's container or service"})
			}
		}
		if len(want) == before {
			want = append(want, checkWant{"capabilities", statusOK, "all that sprof uses", ""})
		}
		feats = bpf.ProbeFeatures()
	} else {
		want = append(want, checkWant{"privileges", statusFail, "uid 65534 without CAP_BPF and CAP_PERFMON", "run sprof with sudo, or as root `setcap cap_bpf,cap_perfmon"})
	}
	if kernelBTF(t) {
		want = append(want, checkWant{"BTF", statusOK, "/sys/kernel/btf/vmlinux", ""})
	} else {
		want = append(want, checkWant{"BTF", statusFail, "/sys/kernel/btf/vmlinux is missing", "CONFIG_DEBUG_INFO_BTF=y"})
	}
	loopWalk := false
	if feats == nil {
		want = append(want, checkWant{"BPF features", statusSkip, "not probed: probing loads BPF programs", "sudo ./sprof check"})
	} else {
		has := map[bpf.Feature]bool{}
		for _, f := range bpf.AllFeatures()[1:] {
			has[f] = feats.Has(f) || kernelSince(t, release, f.Since())
			w := checkWant{f.String(), statusOK, "present, for " + f.Use(), ""}
			if !has[f] {
				w = checkWant{f.String(), statusWarn, "missing (Linux " + f.Since() + " and newer have it)", "a Linux " + f.Since() + " or newer kernel"}
				if !f.Optional() {
					w.status = statusFail
				}
			}
			want = append(want, w)
		}
		loopWalk = has[bpf.FeatureLoop] && has[bpf.FeatureFindVMA] && has[bpf.FeatureCurrentTaskBTF]
	}

	paranoid := sysctl(t, "perf_event_paranoid")
	switch {
	case paranoid <= 2:
		want = append(want, checkWant{"perf_event_paranoid", statusOK, fmt.Sprintf("%d; does not limit sprof", paranoid), ""})
	case caps&(1<<unix.CAP_SYS_ADMIN) != 0:
		want = append(want, checkWant{"perf_event_paranoid", statusOK, fmt.Sprintf("%d; Debian's and Ubuntu's kernels then open perf events only for CAP_SYS_ADMIN, which this process has", paranoid), ""})
	default:
		want = append(want, checkWant{"perf_event_paranoid", statusWarn, fmt.Sprintf("%d: Debian's and Ubuntu's kernels then open perf events only for CAP_SYS_ADMIN", paranoid), "`sysctl kernel.perf_event_paranoid=2`"})
	}
	if rate := sysctl(t, "perf_event_max_sample_rate"); rate < defaultFrequency {
		want = append(want, checkWant{"perf_event_max_sample_rate", statusWarn, fmt.Sprintf("%d Hz, below record's default", rate), "sysctl kernel.perf_event_max_sample_rate="})
	} else {
		want = append(want, checkWant{"perf_event_max_sample_rate", statusOK, fmt.Sprintf("%d Hz: -F up to %d", rate, rate), ""})
	}
	if depth := sysctl(t, "perf_event_max_stack"); depth < 127 {
		want = append(want, checkWant{"perf_event_max_stack", statusWarn, fmt.Sprintf("%d: kernel stacks are cut at %d frames", depth, depth), "sysctl kernel.perf_event_max_stack=127"})
	} else {
		want = append(want, checkWant{"perf_event_max_stack", statusOK, fmt.Sprintf("%d: kernel stacks of up to %d frames", depth, min(depth, 128)), ""})
	}
	if kptr := sysctl(t, "kptr_restrict"); kptr >= 2 {
		want = append(want, checkWant{"kptr_restrict", statusWarn, fmt.Sprintf("%d: /proc/kallsyms hides kernel addresses", kptr), "sysctl kernel.kptr_restrict=1"})
	} else {
		want = append(want, checkWant{"kptr_restrict", statusOK, fmt.Sprintf("%d: kernel symbols readable with CAP_SYSLOG", kptr), ""})
	}
	if points := mountPoints(t, "cgroup2", unix.CGROUP2_SUPER_MAGIC); len(points) > 0 {
		want = append(want, checkWant{"cgroup v2", statusOK, "mounted at " + strings.Join(points, ", ") + ":", ""})
	} else {
		want = append(want, checkWant{"cgroup v2", statusWarn, "not mounted", "mount -t cgroup2"})
	}
	if points := mountPoints(t, "tracefs", unix.TRACEFS_MAGIC); len(points) > 0 {
		want = append(want, checkWant{"tracefs", statusOK, "mounted at " + strings.Join(points, ", ") + ";", ""})
	} else {
		want = append(want, checkWant{"tracefs", statusOK, "not mounted; sprof does not need it", ""})
	}
	if u.debuginfod != "" {
		want = append(want, checkWant{"debuginfod", statusOK, "DEBUGINFOD_URLS names " + u.debuginfod + ":", ""})
	} else {
		want = append(want, checkWant{"debuginfod", statusWarn, "DEBUGINFOD_URLS is not set: debug files this host lacks are not fetched", "export DEBUGINFOD_URLS="})
	}
	if u.root {
		want = append(want, checkWant{"GSYM cache", statusOK, u.cacheDetail, ""})
	} else {
		want = append(want, checkWant{"GSYM cache", statusWarn, u.cacheDetail, "pass --cache-dir"})
	}

	switch {
	case feats == nil:
		want = append(want,
			checkWant{"stack copies", statusSkip, "not probed without privileges", ""},
			checkWant{"in-kernel unwinding", statusSkip, "not probed without privileges", ""},
			checkWant{"off-CPU", statusSkip, "not probed without privileges", ""})
		return want
	case loopWalk:
		want = append(want,
			checkWant{"stack copies", statusOK, "available: code without frame pointers is unwound from copies of the stack", ""},
			checkWant{"in-kernel unwinding", statusOK, "user stacks over the unwind tables of code without frame pointers (.sframe, .eh_frame; --unwind auto) and by frame pointers, up to 1,024 frames in one bpf_loop", ""})
	default:
		want = append(want,
			checkWant{"stack copies", statusWarn, "available, but kernel " + release + " has no ", "a Linux 5.17 or newer kernel"},
			checkWant{"in-kernel unwinding", statusOK, "user stacks by frame pointers, up to 1,024 frames in tail calls of 32", ""})
	}
	if offCPUBTF(t, release) {
		want = append(want, checkWant{"off-CPU", statusOK, "available: --off-cpu records where threads wait", ""})
	} else {
		want = append(want, checkWant{"off-CPU", statusWarn, "--off-cpu is not available: ", "a Linux 5.10 or newer kernel with BTF"})
	}
	return want
}

// kernelSince reports whether release is at least since ("5.17").
func kernelSince(t *testing.T, release, since string) bool {
	t.Helper()
	major, minor, ok := strings.Cut(since, ".")
	maj, err1 := strconv.Atoi(major)
	min, err2 := strconv.Atoi(minor)
	if !ok || err1 != nil || err2 != nil {
		t.Fatalf("feature since %q is not MAJOR.MINOR", since)
	}
	return kernelAtLeast(release, maj, min)
}

// assertCheck holds check's output, line by line, to want: the same
// items in the same order, each with the status, a detail holding want's
// and, for a warn or fail line, a fix holding want's. The last line and
// the exit status follow from the statuses: sprof can record unless a
// line fails.
func assertCheck(t *testing.T, code int, out, errs string, want []checkWant) {
	t.Helper()
	items, order, last := parseCheck(t, out)
	var wantOrder, failed []string
	for _, w := range want {
		wantOrder = append(wantOrder, w.item)
		if w.status == statusFail {
			failed = append(failed, w.item)
		}
		got, ok := items[w.item]
		if !ok {
			continue // reported with the order below
		}
		if got.status != w.status || !strings.Contains(got.detail, w.detail) || !strings.Contains(got.fix, w.fix) {
			t.Errorf("%s:\n got %s\nwant %s, a detail with %q and a fix with %q", w.item, got, w.status, w.detail, w.fix)
		}
		if (got.status == statusWarn || got.status == statusFail) && got.fix == "" {
			t.Errorf("%s: %s without a fix", w.item, got.status)
		}
	}
	if strings.Join(order, "|") != strings.Join(wantOrder, "|") {
		t.Errorf("items %q,\nwant %q", order, wantOrder)
	}
	if len(failed) == 0 {
		if code != 0 || last != "sprof can record here" || errs != "" {
			t.Errorf("exit %d, last line %q, stderr %q; want 0, \"sprof can record here\", nothing", code, last, errs)
		}
		return
	}
	wantErr := "sprof check: sprof cannot record here; fix the fail lines above (" + strings.Join(failed, ", ") + ")\n"
	if code != 1 || errs != wantErr {
		t.Errorf("exit %d, stderr %q; want 1, %q", code, errs, wantErr)
	}
}

// TestCheckAsRoot runs `sprof check` as root on this host and holds each
// of its lines to what the test finds itself (wantCheck). It needs only
// uname and sysctl besides the kernel, so it runs in the kernel VMs'
// busybox too.
func TestCheckAsRoot(t *testing.T) {
	testenv.RequireRoot(t)
	cache := t.TempDir()
	writeCache(t, cache)
	servers := "http://127.0.0.1:1 https://debuginfod.example"
	t.Setenv("DEBUGINFOD_URLS", servers)
	code, out, errs := runSprof("check", "--cache-dir", cache)
	t.Logf("check:\n%s%s", out, errs)
	assertCheck(t, code, out, errs, wantCheck(t, checkUser{root: true, cacheDetail: cache + ": 3 files, 3.0 KiB", debuginfod: servers}))
}

// TestCheckUnprivileged reruns the test binary as nobody without
// capabilities: check must say that privileges are what is missing, probe
// no BPF feature (it cannot tell), say what it can tell without
// privileges as it does for root, and exit 1.
func TestCheckUnprivileged(t *testing.T) {
	testenv.RequireRoot(t)
	setpriv := testenv.RequireTool(t, "setpriv")
	bin := testenv.UnprivilegedCopy(t)
	cache := t.TempDir() // root's, 0700: nobody may not write it
	cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", bin)
	cmd.Env = append(os.Environ(), "SPROF_TEST_MAIN=check --cache-dir "+cache, "DEBUGINFOD_URLS=", "SUDO_USER=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	t.Logf("check as nobody:\n%s%s", stdout.String(), stderr.String())
	code := 0
	if exit := (*exec.ExitError)(nil); errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	assertCheck(t, code, stdout.String(), stderr.String(), wantCheck(t, checkUser{cacheDetail: cache + ": permission denied"}))
}

// The lines for what this host has not: each branch, on its inputs.
func TestCheckLines(t *testing.T) {
	notSupported := fmt.Errorf("probe: %w", ebpf.ErrNotSupported)
	const perfmon = 1<<unix.CAP_BPF | 1<<unix.CAP_PERFMON
	for _, tc := range []struct {
		got  checkLine
		want string
	}{
		{privilegesLine(1000, 0, nil), "fail privileges: uid 1000 without CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN): may not load BPF programs; fix: run sprof with sudo, or as root `" + bpf.SetcapCommand + " ./sprof`"},
		{privilegesLine(1000, 1<<unix.CAP_BPF|1<<unix.CAP_PERFMON, nil), "ok   privileges: uid 1000 with CAP_BPF and CAP_PERFMON: may load BPF programs and open perf events"},
		{featureLine(bpf.FeatureLoop, notSupported, true), "fail bpf_loop: missing (Linux 5.17 and newer have it), needed for frame-pointer walks of up to 1024 frames; fix: a Linux 5.17 or newer kernel"},
		{featureLine(bpf.FeatureLoop, notSupported, false), "warn bpf_loop: missing (Linux 5.17 and newer have it), used for frame-pointer walks of up to 1024 frames; without it the walk runs in up to 33 tail calls of 32 frames; fix: a Linux 5.17 or newer kernel"},
		{featureLine(bpf.FeatureRingBuf, unix.EPERM, true), "fail ring buffer: probe failed: operation not permitted; fix: check kernel.unprivileged_bpf_disabled, lockdown (/sys/kernel/security/lockdown) and seccomp"},
		{sampleRateLine(50, nil), "warn perf_event_max_sample_rate: 50 Hz, below record's default -F 99; fix: `sysctl kernel.perf_event_max_sample_rate=990`, or record with -F 50"},
		{maxStackLine(64, nil), "warn perf_event_max_stack: 64: kernel stacks are cut at 64 frames; fix: `sysctl kernel.perf_event_max_stack=127`"},
		{kptrLine(2, nil), "warn kptr_restrict: 2: /proc/kallsyms hides kernel addresses from everyone, kernel frames stay unnamed; fix: `sysctl kernel.kptr_restrict=1`"},
		{cgroupLine(nil, nil), "warn cgroup v2: not mounted: --cgroup has nothing to filter by; fix: `mount -t cgroup2 none /sys/fs/cgroup`"},
		{debuginfodLine("", true, []string{"/etc/debuginfod/debian.urls"}), "warn debuginfod: DEBUGINFOD_URLS is not set (sudo drops it): debug files this host lacks are not fetched; fix: export DEBUGINFOD_URLS=\"$(cat /etc/debuginfod/debian.urls)\", then `sudo --preserve-env=DEBUGINFOD_URLS ./sprof …`"},
		{stackCopyLine(nil), "skip stack copies: not probed without privileges"},
		{unwindingLine(nil, nil), "skip in-kernel unwinding: not probed without privileges"},
		{unwindingLine(&bpf.Features{}, errors.New("load BPF program: permission denied")), "warn in-kernel unwinding: the kernel refused the walk over unwind tables (load BPF program: permission denied): --unwind auto copies the stacks of code without frame pointers, unwound in user space; frame pointers are walked in the kernel; kernel stacks by the kernel's unwinder; fix: report this line and `sprof version` to sprof's developers"},
		{offCPULine(nil, nil), "skip off-CPU: not probed without privileges"},
		{offCPULine(&bpf.Features{}, fmt.Errorf("BTF tracepoint sys_exit: %w", notSupported)), "warn off-CPU: --off-cpu is not available: BTF tracepoint sys_exit: probe: not supported; fix: a Linux 5.10 or newer kernel with BTF"},
		{offCPULine(&bpf.Features{}, unix.EPERM), "warn off-CPU: --off-cpu probe failed: operation not permitted; fix: " + probeFailedFix},
		{paranoidLine(3, nil, 1<<unix.CAP_SYS_ADMIN, true, nil), "ok   perf_event_paranoid: 3; Debian's and Ubuntu's kernels then open perf events only for CAP_SYS_ADMIN, which this process has"},
		{paranoidLine(4, nil, 0, false, nil), "warn perf_event_paranoid: 4: Debian's and Ubuntu's kernels then open perf events only for CAP_SYS_ADMIN, so sprof records as root or with sudo but not with setcap capabilities; fix: `sysctl kernel.perf_event_paranoid=2` to record with setcap capabilities"},
		{paranoidLine(3, nil, perfmon, true, func() error { return fmt.Errorf("perf_event_open: %w", unix.EACCES) }), "fail perf_event_paranoid: 3: this kernel opens perf events only for CAP_SYS_ADMIN at this level (Debian's and Ubuntu's rule), CAP_PERFMON is not enough; fix: run sprof as root or with sudo, or `sysctl kernel.perf_event_paranoid=2`"},
		{paranoidLine(3, nil, perfmon, true, func() error { return nil }), "ok   perf_event_paranoid: 3; this kernel opens perf events for CAP_PERFMON at this level"},
	} {
		if got := tc.got.String(); got != tc.want {
			t.Errorf("got  %s\nwant %s", got, tc.want)
		}
	}
	caps := uint64(1<<unix.CAP_BPF | 1<<unix.CAP_PERFMON | 1<<unix.CAP_SYS_PTRACE | 1<<unix.CAP_DAC_READ_SEARCH | 1<<unix.CAP_CHECKPOINT_RESTORE | 1<<unix.CAP_SYS_ADMIN)
	var got []string
	for _, l := range capabilityLines(1000, caps, "5.10.0-32-amd64") {
		got = append(got, l.String())
	}
	if want := []string{
		"warn CAP_SYSLOG: missing: /proc/kallsyms shows no addresses: kernel frames stay unnamed; fix: add cap_syslog to sprof's setcap, or run it as root",
		"warn CAP_SYS_RESOURCE: missing: this kernel charges BPF maps to RLIMIT_MEMLOCK (before 5.11), which only it lifts; fix: add cap_sys_resource to sprof's setcap, or run it as root",
	}; strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("capability lines on 5.10:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if l := capabilityLines(0, caps|1<<unix.CAP_SYSLOG, "6.1.0-13-amd64"); len(l) != 1 || l[0].status != statusOK {
		t.Errorf("6.1 without CAP_SYS_RESOURCE: %v, want one ok line (BPF memory is not charged to RLIMIT_MEMLOCK)", l)
	}
}

func TestKernelAtLeast(t *testing.T) {
	for _, tc := range []struct {
		release string
		want    bool
	}{{"5.10.0-32-amd64", false}, {"5.11", true}, {"6.1.0-13-amd64", true}, {"5.17rc1", true}, {"4.19.0", false}, {"garbage", false}, {"", false}} {
		if got := kernelAtLeast(tc.release, 5, 11); got != tc.want {
			t.Errorf("kernelAtLeast(%q, 5, 11) = %v", tc.release, got)
		}
	}
}

func TestParseMounts(t *testing.T) {
	in := `36 25 0:30 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate
40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
41 22 0:12 / /mnt/with\040space rw - tracefs nodev rw
broken line
`
	got, err := parseMounts(strings.NewReader(in))
	want := []mount{{"cgroup2", "/sys/fs/cgroup"}, {"cgroup2", "/sys/fs/cgroup/unified"}, {"tracefs", "/mnt/with space"}}
	if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("parseMounts = %v, %v; want %v", got, err, want)
	}
}
