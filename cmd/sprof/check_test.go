package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/sprof/sprof/bpf"
	"github.com/sprof/sprof/internal/testenv"
)

// checkLineRE is the shape of every line `sprof check` prints but the last.
var checkLineRE = regexp.MustCompile(`^(ok  |warn|fail|skip) ([^:]+): (.+)$`)

// parseCheck splits check's output into its item lines, by item, in order,
// and its last line; every line must have the shape and a unique item.
func parseCheck(t *testing.T, out string) (map[string]checkLine, []string, string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	byItem := map[string]checkLine{}
	var order []string
	for _, l := range lines[:len(lines)-1] {
		m := checkLineRE.FindStringSubmatch(l)
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
	return byItem, order, lines[len(lines)-1]
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

// TestCheckAsRoot runs `sprof check` as root on this host and holds each
// line to what another tool says of the host: uname, /proc/self/status,
// sysctl, findmnt, and bpf.ProbeFeatures (which bpf's tests hold to
// bpftool).
func TestCheckAsRoot(t *testing.T) {
	testenv.RequireRoot(t)
	cache := t.TempDir()
	writeCache(t, cache)
	t.Setenv("DEBUGINFOD_URLS", "http://127.0.0.1:1 https://debuginfod.example")
	code, out, errs := runSprof("check", "--cache-dir", cache)
	t.Logf("check:\n%s%s", out, errs)
	items, order, last := parseCheck(t, out)
	if code != 0 || last != "sprof can record here" || errs != "" {
		t.Fatalf("exit %d, last line %q, stderr %q; want 0, \"sprof can record here\", nothing", code, last, errs)
	}
	expect := func(item, status, detail string) {
		t.Helper()
		l, ok := items[item]
		if !ok {
			t.Errorf("no %q line", item)
			return
		}
		if l.status != status || !strings.Contains(l.detail, detail) {
			t.Errorf("%q: %q %q, want status %q and a detail with %q", item, l.status, l.detail, status, detail)
		}
		if (l.status == statusWarn || l.status == statusFail) && l.fix == "" {
			t.Errorf("%q: %s without a fix", item, l.status)
		}
	}
	release := toolOutput(t, "uname", "-r")
	expect("kernel", statusOK, "Linux "+release+" on "+toolOutput(t, "uname", "-m"))
	expect("privileges", statusOK, "root")
	caps := procCapEff(t)
	wantCaps := []string{"kernel", "privileges"}
	for _, c := range optionalCaps {
		if caps&(1<<c.cap) == 0 && !(c.cap == unix.CAP_SYS_RESOURCE && kernelAtLeast(release, 5, 11)) {
			expect(c.name, statusWarn, "missing: ")
			wantCaps = append(wantCaps, c.name)
		}
	}
	if len(wantCaps) == 2 {
		expect("capabilities", statusOK, "all that sprof uses")
		wantCaps = append(wantCaps, "capabilities")
	}
	want := append(wantCaps, "BTF")
	expect("BTF", statusOK, "/sys/kernel/btf/vmlinux")
	feats := bpf.ProbeFeatures()
	for _, f := range bpf.AllFeatures()[1:] {
		status := statusOK
		switch {
		case feats.Has(f):
		case f.Optional():
			status = statusWarn
		default:
			status = statusFail
		}
		expect(f.String(), status, f.Use())
		want = append(want, f.String())
	}
	for _, name := range []string{"perf_event_paranoid", "perf_event_max_sample_rate", "perf_event_max_stack", "kptr_restrict"} {
		v := toolOutput(t, "sysctl", "-n", "kernel."+name)
		if l := items[name]; !strings.HasPrefix(l.detail, v+":") && !strings.HasPrefix(l.detail, v+";") && !strings.HasPrefix(l.detail, v+" Hz") {
			t.Errorf("%s: %q, sysctl says %s", name, l.detail, v)
		}
		want = append(want, name)
	}
	cgroup2, _ := exec.Command("findmnt", "-n", "-t", "cgroup2", "-o", "TARGET").Output()
	if points := strings.Fields(string(cgroup2)); len(points) > 0 {
		expect("cgroup v2", statusOK, "mounted at "+strings.Join(points, ", ")+":")
	} else {
		expect("cgroup v2", statusWarn, "not mounted")
	}
	tracefs, _ := exec.Command("findmnt", "-n", "-t", "tracefs", "-o", "TARGET").Output()
	if points := strings.Fields(string(tracefs)); len(points) > 0 {
		expect("tracefs", statusOK, "mounted at "+strings.Join(points, ", ")+";")
	} else {
		expect("tracefs", statusOK, "not mounted; sprof does not need it")
	}
	expect("debuginfod", statusOK, "DEBUGINFOD_URLS names http://127.0.0.1:1 https://debuginfod.example:")
	expect("GSYM cache", statusOK, cache+": 3 files, 3.0 KiB")
	copies := statusOK
	if !feats.Has(bpf.FeatureFindVMA) || !feats.Has(bpf.FeatureLoop) || !feats.Has(bpf.FeatureCurrentTaskBTF) {
		copies = statusWarn
	}
	expect("stack copies", copies, "")
	want = append(want, "cgroup v2", "tracefs", "debuginfod", "GSYM cache", "stack copies")
	if strings.Join(order, "|") != strings.Join(want, "|") {
		t.Errorf("items %q,\nwant %q", order, want)
	}
}

// TestCheckUnprivileged reruns the test binary as nobody without
// capabilities: check must say that privileges are what is missing, probe
// no BPF feature (it cannot tell), and exit 1.
func TestCheckUnprivileged(t *testing.T) {
	testenv.RequireRoot(t)
	setpriv := testenv.RequireTool(t, "setpriv")
	bin := testenv.UnprivilegedCopy(t)
	cache := t.TempDir() // root's, 0700: nobody may not write it
	cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", bin)
	cmd.Env = append(os.Environ(), "SPROF_TEST_MAIN=check --cache-dir "+cache, "DEBUGINFOD_URLS=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	t.Logf("check as nobody:\n%s%s", stdout.String(), stderr.String())
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("exit: %v, want status 1", err)
	}
	if want := "sprof check: sprof cannot record here; fix the fail lines above (privileges)\n"; stderr.String() != want {
		t.Errorf("stderr %q, want %q", stderr.String(), want)
	}
	items, order, _ := parseCheck(t, stdout.String()+"\n")
	want := []string{"kernel", "privileges", "BTF", "BPF features", "perf_event_paranoid", "perf_event_max_sample_rate",
		"perf_event_max_stack", "kptr_restrict", "cgroup v2", "tracefs", "debuginfod", "GSYM cache", "stack copies"}
	if strings.Join(order, "|") != strings.Join(want, "|") {
		t.Errorf("items %q,\nwant %q", order, want)
	}
	for item, want := range map[string]checkLine{
		"privileges":   {statusFail, "", "uid 65534 without CAP_BPF and CAP_PERFMON", "run sprof with sudo, or as root `setcap cap_bpf,cap_perfmon"},
		"BPF features": {statusSkip, "", "not probed: probing loads BPF programs", "sudo ./sprof check"},
		"debuginfod":   {statusWarn, "", "DEBUGINFOD_URLS is not set", "export DEBUGINFOD_URLS="},
		"GSYM cache":   {statusWarn, "", cache + ": permission denied", "pass --cache-dir"},
		"stack copies": {statusSkip, "", "not probed", ""},
	} {
		got := items[item]
		if got.status != want.status || !strings.Contains(got.detail, want.detail) || !strings.Contains(got.fix, want.fix) {
			t.Errorf("%s: %+v, want %+v", item, got, want)
		}
	}
}

// The lines for what this host has not: each branch, on its inputs.
func TestCheckLines(t *testing.T) {
	notSupported := fmt.Errorf("probe: %w", ebpf.ErrNotSupported)
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
