package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/sprof/sprof/bpf"
	"github.com/sprof/sprof/collector"
	"github.com/sprof/sprof/pipeline"
	"github.com/sprof/sprof/symbolize"
)

const checkUsage = `Usage: sprof check [--cache-dir DIR]

Says what this host allows sprof and what it lacks, before a recording: the
kernel and each BPF feature sprof uses, kernel BTF, privileges, the perf
sysctls, cgroup v2, tracefs, debuginfod, the GSYM cache, and whether stack
copies, the in-kernel stack walk and off-CPU recording work. One line per item, starting with ok, warn (sprof records, with
less), fail (sprof cannot record) or skip (not probed), and a fix for what
is missing. Run it as the user who will record: privileges decide most of
it, and BPF features can only be probed with them.

Exit status: 0 when sprof can record here, 1 when it cannot.

Examples:
  sudo ./sprof check
  ./sprof check --cache-dir /srv/sprof-cache
`

// check status words, each as wide as the widest.
const (
	statusOK   = "ok  "
	statusWarn = "warn"
	statusFail = "fail"
	statusSkip = "skip"
)

// checkLine is one line of `sprof check`: an item, what was found, and for
// what is missing how to get it.
type checkLine struct {
	status, item, detail, fix string
}

func (l checkLine) String() string {
	s := l.status + " " + l.item + ": " + l.detail
	if l.fix != "" {
		s += "; fix: " + l.fix
	}
	return s
}

func runCheck(e *env, args []string) error {
	fs := newFlagSet(e, "check", checkUsage)
	cacheDir := fs.String("cache-dir", "", "the GSYM cache directory to check, as record's --cache-dir (default /var/cache/sprof as root, else $XDG_CACHE_HOME/sprof or ~/.cache/sprof)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q; check takes none", fs.Arg(0))
	}
	lines := checkHost(*cacheDir)
	var failed []string
	for _, l := range lines {
		fmt.Fprintln(e.stdout, l)
		if l.status == statusFail {
			failed = append(failed, l.item)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("sprof cannot record here; fix the fail lines above (%s)", strings.Join(failed, ", "))
	}
	fmt.Fprintln(e.stdout, "sprof can record here")
	return nil
}

// checkHost gathers what `sprof check` reports, in the order it prints it.
func checkHost(cacheDir string) []checkLine {
	caps, capsErr := bpf.EffectiveCaps()
	privileged := capsErr == nil && bpf.CanLoad(caps)
	var uts unix.Utsname
	machine, release := "unknown", "unknown"
	if unix.Uname(&uts) == nil {
		machine, release = unix.ByteSliceToString(uts.Machine[:]), unix.ByteSliceToString(uts.Release[:])
	}
	lines := []checkLine{
		{statusOK, "kernel", fmt.Sprintf("Linux %s on %s", release, machine), ""},
		privilegesLine(os.Geteuid(), caps, capsErr),
	}
	if privileged {
		lines = append(lines, capabilityLines(os.Geteuid(), caps, release)...)
	}
	var feats *bpf.Features
	var offCPUErr, tablesErr error
	if privileged {
		feats = bpf.ProbeFeatures()
		offCPUErr = bpf.ProbeOffCPU()
		if feats.Check() == nil && feats.LoopWalk() {
			tablesErr = pipeline.ProbeSampler(recordDefaults())
		}
	}
	lines = append(lines, featureLines(feats, btfPresent())...)
	paranoid, paranoidErr := readSysctl("perf_event_paranoid")
	lines = append(lines,
		paranoidLine(paranoid, paranoidErr, caps, privileged, openCPUClock),
		sampleRateLine(readSysctl("perf_event_max_sample_rate")),
		maxStackLine(readSysctl("perf_event_max_stack")),
		kptrLine(readSysctl("kptr_restrict")),
	)
	mounts, mountErr := readMounts("/proc/self/mountinfo")
	lines = append(lines,
		cgroupLine(mounts, mountErr),
		tracefsLine(mounts, mountErr),
		debuginfodLine(os.Getenv("DEBUGINFOD_URLS"), os.Getenv("SUDO_USER") != "", debuginfodURLFiles()),
		cacheLine(cacheDir),
		stackCopyLine(feats),
		unwindingLine(feats, tablesErr),
		offCPULine(feats, offCPUErr),
	)
	return lines
}

func privilegesLine(euid int, caps uint64, err error) checkLine {
	const item = "privileges"
	if err != nil {
		return checkLine{statusFail, item, err.Error(), ""}
	}
	if bpf.CanLoad(caps) {
		who := fmt.Sprintf("uid %d with CAP_BPF and CAP_PERFMON", euid)
		if caps&(1<<unix.CAP_SYS_ADMIN) != 0 {
			who = fmt.Sprintf("uid %d with CAP_SYS_ADMIN", euid)
		}
		if euid == 0 {
			who = "root"
		}
		return checkLine{statusOK, item, who + ": may load BPF programs and open perf events", ""}
	}
	return checkLine{statusFail, item, fmt.Sprintf("uid %d without CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN): may not load BPF programs", euid),
		"run sprof with sudo, or as root `" + bpf.SetcapCommand + " ./sprof`"}
}

// optionalCaps are the capabilities README.md's Requirements lists beyond
// CAP_BPF and CAP_PERFMON, each with what a recording lacks without it.
var optionalCaps = []struct {
	cap          uint
	name, setcap string
	without      string
}{
	{unix.CAP_SYS_PTRACE, "CAP_SYS_PTRACE", "cap_sys_ptrace", "other users' processes' mappings and binaries cannot be read: their frames stay unnamed and stacks without frame pointers stop"},
	{unix.CAP_DAC_READ_SEARCH, "CAP_DAC_READ_SEARCH", "cap_dac_read_search", "binaries this user may not read stay unnamed"},
	{unix.CAP_CHECKPOINT_RESTORE, "CAP_CHECKPOINT_RESTORE", "cap_checkpoint_restore", "binaries inside containers and deleted ones cannot be opened through /proc/PID/map_files"},
	{unix.CAP_SYSLOG, "CAP_SYSLOG", "cap_syslog", "/proc/kallsyms shows no addresses: kernel frames stay unnamed"},
	{unix.CAP_SYS_RESOURCE, "CAP_SYS_RESOURCE", "cap_sys_resource", "this kernel charges BPF maps to RLIMIT_MEMLOCK (before 5.11), which only it lifts"},
	{unix.CAP_SYS_ADMIN, "CAP_SYS_ADMIN", "cap_sys_admin", "--stats has no BPF run-time figures unless kernel.bpf_stats_enabled=1"},
}

// capabilityLines says, for a process that may record, which of the other
// capabilities sprof uses it lacks: one line each, or one line for all.
// Root can lack them too, in a container or a service whose bounding set
// drops them. CAP_SYS_RESOURCE matters only where BPF memory counts
// against RLIMIT_MEMLOCK: before Linux 5.11.
func capabilityLines(euid int, caps uint64, release string) []checkLine {
	var lines []checkLine
	for _, c := range optionalCaps {
		if caps&(1<<c.cap) != 0 || (c.cap == unix.CAP_SYS_RESOURCE && kernelAtLeast(release, 5, 11)) {
			continue
		}
		fix := "add " + c.setcap + " to sprof's setcap, or run it as root"
		if euid == 0 {
			fix = "grant it to sprof's container or service (docker run --cap-add, systemd CapabilityBoundingSet=)"
		}
		lines = append(lines, checkLine{statusWarn, c.name, "missing: " + c.without, fix})
	}
	if len(lines) == 0 {
		return []checkLine{{statusOK, "capabilities", "all that sprof uses", ""}}
	}
	return lines
}

// kernelAtLeast reports whether release ("6.1.0-13-amd64") is Linux
// major.minor or newer; false when it does not parse.
func kernelAtLeast(release string, major, minor int) bool {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return false
	}
	maj, err1 := strconv.Atoi(parts[0])
	end := strings.IndexFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(parts[1])
	}
	min, err2 := strconv.Atoi(parts[1][:end])
	if err1 != nil || err2 != nil {
		return false
	}
	return maj > major || (maj == major && min >= minor)
}

func btfPresent() error {
	_, err := os.Stat("/sys/kernel/btf/vmlinux")
	return err
}

// featureLines lists kernel BTF, which anyone may look for, and each BPF
// feature, which only a privileged process can probe (feats nil: not
// probed).
func featureLines(feats *bpf.Features, btfErr error) []checkLine {
	btf := checkLine{statusOK, "BTF", "/sys/kernel/btf/vmlinux", ""}
	if btfErr != nil {
		btf = checkLine{statusFail, "BTF", "/sys/kernel/btf/vmlinux is missing", "a kernel built with CONFIG_DEBUG_INFO_BTF=y (every major distribution's since 2021)"}
	}
	lines := []checkLine{btf}
	if feats == nil {
		return append(lines, checkLine{statusSkip, "BPF features", "not probed: probing loads BPF programs, which needs the privileges above",
			"run it as root: `sudo ./sprof check`"})
	}
	required := map[bpf.Feature]bool{}
	for _, f := range bpf.Required() {
		required[f] = true
	}
	for _, f := range bpf.AllFeatures() {
		if f == bpf.FeatureBTF {
			continue
		}
		lines = append(lines, featureLine(f, feats.Err(f), required[f]))
	}
	return lines
}

// probeFailedFix is what to look at when a BPF probe fails for a process
// that may load BPF programs.
const probeFailedFix = "check kernel.unprivileged_bpf_disabled, lockdown (/sys/kernel/security/lockdown) and seccomp"

func featureLine(f bpf.Feature, err error, required bool) checkLine {
	switch {
	case err == nil:
		return checkLine{statusOK, f.String(), "present, for " + f.Use(), ""}
	case errors.Is(err, ebpf.ErrNotSupported) && !required:
		return checkLine{statusWarn, f.String(), fmt.Sprintf("missing (Linux %s and newer have it), used for %s; without it %s",
			f.Since(), f.Use(), f.Without()), fmt.Sprintf("a Linux %s or newer kernel", f.Since())}
	case errors.Is(err, ebpf.ErrNotSupported):
		return checkLine{statusFail, f.String(), fmt.Sprintf("missing (Linux %s and newer have it), needed for %s", f.Since(), f.Use()),
			fmt.Sprintf("a Linux %s or newer kernel", f.Since())}
	default:
		return checkLine{statusFail, f.String(), "probe failed: " + err.Error(), probeFailedFix}
	}
}

// readSysctl reads kernel.NAME as an integer.
func readSysctl(name string) (int, error) {
	b, err := os.ReadFile("/proc/sys/kernel/" + name)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// paranoidLine reports kernel.perf_event_paranoid. Mainline kernels
// define levels up to 2, which limit processes without CAP_PERFMON and so
// never sprof. Debian's and Ubuntu's kernels add higher ones (Debian's
// default is 3, Ubuntu's 4) at which perf_event_open needs CAP_SYS_ADMIN:
// CAP_PERFMON is not enough, so a sprof given capabilities with setcap
// cannot open its events, while root and sudo can. Whether this kernel
// has that rule shows only by trying, which open does for a process that
// may record without CAP_SYS_ADMIN.
func paranoidLine(v int, err error, caps uint64, privileged bool, open func() error) checkLine {
	const item = "perf_event_paranoid"
	const fix = "run sprof as root or with sudo, or `sysctl kernel.perf_event_paranoid=2`"
	switch {
	case err != nil:
		return checkLine{statusWarn, item, err.Error(), ""}
	case v <= 2:
		return checkLine{statusOK, item, fmt.Sprintf("%d; does not limit sprof, which needs CAP_PERFMON at any value", v), ""}
	case caps&(1<<unix.CAP_SYS_ADMIN) != 0:
		return checkLine{statusOK, item, fmt.Sprintf("%d; Debian's and Ubuntu's kernels then open perf events only for CAP_SYS_ADMIN, which this process has", v), ""}
	case !privileged:
		return checkLine{statusWarn, item, fmt.Sprintf("%d: Debian's and Ubuntu's kernels then open perf events only for CAP_SYS_ADMIN, so sprof records as root or with sudo but not with setcap capabilities", v),
			"`sysctl kernel.perf_event_paranoid=2` to record with setcap capabilities"}
	}
	switch err := open(); {
	case err == nil:
		return checkLine{statusOK, item, fmt.Sprintf("%d; this kernel opens perf events for CAP_PERFMON at this level", v), ""}
	case errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM):
		return checkLine{statusFail, item, fmt.Sprintf("%d: this kernel opens perf events only for CAP_SYS_ADMIN at this level (Debian's and Ubuntu's rule), CAP_PERFMON is not enough", v), fix}
	default:
		return checkLine{statusWarn, item, fmt.Sprintf("%d; opening a cpu-clock event failed: %v", v, err), fix}
	}
}

// openCPUClock opens and closes the event sprof record opens on each CPU:
// cpu-clock, for every process, here on CPU 0 and disabled.
func openCPUClock() error {
	attr := unix.PerfEventAttr{
		Type:   unix.PERF_TYPE_SOFTWARE,
		Config: unix.PERF_COUNT_SW_CPU_CLOCK,
		Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Sample: defaultFrequency,
		Bits:   unix.PerfBitFreq | unix.PerfBitDisabled,
	}
	fd, err := unix.PerfEventOpen(&attr, -1, 0, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("perf_event_open: %w", err)
	}
	return unix.Close(fd)
}

// sampleRateLine reports kernel.perf_event_max_sample_rate against
// record's default frequency. The kernel lowers it by itself when sampling
// interrupts run long, so a low value is worth knowing before -F fails.
func sampleRateLine(v int, err error) checkLine {
	const item = "perf_event_max_sample_rate"
	switch {
	case err != nil:
		return checkLine{statusFail, item, err.Error(), ""}
	case v < defaultFrequency:
		return checkLine{statusWarn, item, fmt.Sprintf("%d Hz, below record's default -F %d", v, defaultFrequency),
			fmt.Sprintf("`sysctl kernel.perf_event_max_sample_rate=%d`, or record with -F %d", 10*defaultFrequency, v)}
	}
	return checkLine{statusOK, item, fmt.Sprintf("%d Hz: -F up to %d", v, v), ""}
}

// maxStackLine reports kernel.perf_event_max_stack, which caps the kernel
// stacks bpf_get_stack returns (sprof asks for up to 128 frames).
func maxStackLine(v int, err error) checkLine {
	const item = "perf_event_max_stack"
	switch {
	case err != nil:
		return checkLine{statusWarn, item, err.Error(), ""}
	case v < 127:
		return checkLine{statusWarn, item, fmt.Sprintf("%d: kernel stacks are cut at %d frames", v, v), "`sysctl kernel.perf_event_max_stack=127`"}
	}
	return checkLine{statusOK, item, fmt.Sprintf("%d: kernel stacks of up to %d frames", v, min(v, 128)), ""}
}

// kptrLine reports kernel.kptr_restrict: at 2 /proc/kallsyms hides kernel
// addresses even from root, and kernel frames cannot be named.
func kptrLine(v int, err error) checkLine {
	const item = "kptr_restrict"
	switch {
	case err != nil:
		return checkLine{statusWarn, item, err.Error(), ""}
	case v >= 2:
		return checkLine{statusWarn, item, fmt.Sprintf("%d: /proc/kallsyms hides kernel addresses from everyone, kernel frames stay unnamed", v),
			"`sysctl kernel.kptr_restrict=1`"}
	}
	return checkLine{statusOK, item, fmt.Sprintf("%d: kernel symbols readable with CAP_SYSLOG", v), ""}
}

// mount is one line of /proc/self/mountinfo: a file system type and where
// it is mounted.
type mount struct{ fstype, point string }

// readMounts parses a mountinfo file: "ID PARENT MAJ:MIN ROOT POINT
// OPTIONS [TAGS...] - FSTYPE SOURCE SUPEROPTIONS".
func readMounts(path string) ([]mount, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseMounts(f)
}

func parseMounts(r io.Reader) ([]mount, error) {
	var mounts []mount
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		for i, f := range fields {
			if f == "-" && i >= 5 && i+1 < len(fields) {
				mounts = append(mounts, mount{fields[i+1], unescapeMount(fields[4])})
				break
			}
		}
	}
	return mounts, sc.Err()
}

// unescapeMount undoes the octal escapes (\040 for a space) mountinfo
// writes in paths.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func mountsOf(mounts []mount, fstype string) []string {
	var points []string
	for _, m := range mounts {
		if m.fstype == fstype {
			points = append(points, m.point)
		}
	}
	return points
}

// cgroupLine reports where cgroup v2 is mounted: --cgroup takes a
// directory there, and container IDs come from processes' v2 paths.
func cgroupLine(mounts []mount, err error) checkLine {
	const item = "cgroup v2"
	if err != nil {
		return checkLine{statusWarn, item, err.Error(), ""}
	}
	points := mountsOf(mounts, "cgroup2")
	if len(points) == 0 {
		return checkLine{statusWarn, item, "not mounted: --cgroup has nothing to filter by", "`mount -t cgroup2 none /sys/fs/cgroup`"}
	}
	return checkLine{statusOK, item, fmt.Sprintf("mounted at %s: --cgroup takes a directory under it", strings.Join(points, ", ")), ""}
}

// tracefsLine reports tracefs, which sprof does not need (its tracepoints
// attach through BTF) but perf, bpftrace and ftrace do: a user comparing
// tools wants to know.
func tracefsLine(mounts []mount, err error) checkLine {
	const item = "tracefs"
	if err != nil {
		return checkLine{statusWarn, item, err.Error(), ""}
	}
	if points := mountsOf(mounts, "tracefs"); len(points) > 0 {
		return checkLine{statusOK, item, fmt.Sprintf("mounted at %s; sprof does not need it", strings.Join(points, ", ")), ""}
	}
	return checkLine{statusOK, item, "not mounted; sprof does not need it (its tracepoints attach through BTF), perf and bpftrace do: `mount -t tracefs nodev /sys/kernel/tracing`", ""}
}

// debuginfodURLFiles returns the server lists Debian's and Fedora's
// libdebuginfod packages install, which their login scripts put into
// DEBUGINFOD_URLS.
func debuginfodURLFiles() []string {
	files, _ := filepath.Glob("/etc/debuginfod/*.urls")
	return files
}

// debuginfodLine reports the servers sprof asks for debug files the host
// lacks.
func debuginfodLine(urls string, underSudo bool, urlFiles []string) checkLine {
	const item = "debuginfod"
	if servers := strings.Fields(urls); len(servers) > 0 {
		return checkLine{statusOK, item, "DEBUGINFOD_URLS names " + strings.Join(servers, " ") + ": debug files this host lacks are fetched", ""}
	}
	detail := "DEBUGINFOD_URLS is not set: debug files this host lacks are not fetched, their frames may stay unnamed"
	fix := "export DEBUGINFOD_URLS=https://debuginfod.debian.net (or your distribution's server)"
	if len(urlFiles) > 0 {
		fix = "export DEBUGINFOD_URLS=\"$(cat " + strings.Join(urlFiles, " ") + ")\""
	}
	if underSudo {
		detail = "DEBUGINFOD_URLS is not set (sudo drops it): debug files this host lacks are not fetched"
		fix += ", then `sudo --preserve-env=DEBUGINFOD_URLS ./sprof …`"
	}
	return checkLine{statusWarn, item, detail, fix}
}

// cacheLine reports the GSYM cache directory: where it is, what it holds,
// and whether sprof may write there (else it reads DWARF on every run).
func cacheLine(dir string) checkLine {
	const item = "GSYM cache"
	if dir == "" {
		d, err := symbolize.DefaultCacheDir()
		if err != nil {
			return checkLine{statusWarn, item, err.Error(), "pass --cache-dir"}
		}
		dir = d
	}
	files, bytes, err := dirUsage(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		var pe *fs.PathError
		if errors.As(err, &pe) && pe.Path == dir {
			err = pe.Err
		}
		return checkLine{statusWarn, item, fmt.Sprintf("%s: %v", dir, err), "pass --cache-dir with a directory this user may write"}
	}
	held := fmt.Sprintf("%s: %d files, %s", dir, files, formatBytes(bytes))
	if errors.Is(err, fs.ErrNotExist) {
		held = dir + ": not created yet"
	}
	if werr := writable(dir); werr != nil {
		return checkLine{statusWarn, item, held + "; not writable (" + werr.Error() + "): symbols are read from DWARF on every run",
			"pass --cache-dir with a directory this user may write"}
	}
	return checkLine{statusOK, item, held, ""}
}

// dirUsage counts the regular files under dir and their bytes.
func dirUsage(dir string) (files int, bytes int64, err error) {
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil // removed meanwhile
		}
		files++
		bytes += info.Size()
		return nil
	})
	return files, bytes, err
}

// writable reports whether this process may create files in dir, or
// create dir in its nearest existing ancestor.
func writable(dir string) error {
	for {
		err := unix.Access(dir, unix.W_OK|unix.X_OK)
		if !errors.Is(err, unix.ENOENT) {
			return err
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return err
		}
		dir = parent
	}
}

func formatBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// stackCopyLine reports whether the sampler can copy user stacks, which
// code without frame pointers (most distribution libraries) needs: on every
// kernel it loads on, with looser bounds before 5.17 (Features.Limits).
func stackCopyLine(feats *bpf.Features) checkLine {
	const item = "stack copies"
	if feats == nil {
		return checkLine{statusSkip, item, "not probed without privileges", ""}
	}
	if limits := feats.Limits(); limits != "" {
		return checkLine{statusWarn, item, "available, but " + limits, "a Linux 5.17 or newer kernel"}
	}
	return checkLine{statusOK, item, "available: code without frame pointers is unwound from copies of the stack", ""}
}

// unwindingLine reports how the sampler walks stacks in the kernel: user
// stacks over the unwind tables of code without frame pointers (--unwind
// auto, on 5.17 and newer) and by frame pointers, in one bpf_loop or
// (before 5.17) in tail calls, and kernel stacks with the kernel's own
// unwinder. tablesErr is why the sampler with tables did not load as
// record opens it by default (recordDefaults), nil when it did or was not
// tried (before 5.17, where auto copies stacks).
func unwindingLine(feats *bpf.Features, tablesErr error) checkLine {
	const item = "in-kernel unwinding"
	const kernel = "; kernel stacks by the kernel's unwinder"
	switch {
	case feats == nil:
		return checkLine{statusSkip, item, "not probed without privileges", ""}
	case feats.Check() != nil:
		return checkLine{statusFail, item, "none: the sampler cannot load on this kernel (see the lines above)", "a Linux 5.10 or newer kernel with BTF"}
	case !feats.LoopWalk():
		return checkLine{statusOK, item, "user stacks by frame pointers, up to 1,024 frames in tail calls of 32 (this kernel has no bpf_loop); --unwind auto copies the stacks of code without frame pointers, unwound in user space (--unwind bpf walks them over unwind tables here too, and takes seconds more to start)" + kernel, ""}
	case tablesErr != nil:
		return checkLine{statusWarn, item, "the kernel refused the walk over unwind tables (" + tablesErr.Error() + "): --unwind auto copies the stacks of code without frame pointers, unwound in user space; frame pointers are walked in the kernel" + kernel,
			"report this line and `sprof version` to sprof's developers"}
	}
	return checkLine{statusOK, item, "user stacks over the unwind tables of code without frame pointers (.sframe, .eh_frame; --unwind auto) and by frame pointers, up to 1,024 frames in one bpf_loop" + kernel, ""}
}

// recordDefaults is the pipeline sprof record runs without flags (the
// agent samples alike), for check to load its sampler: every process,
// Python frames, the walk over unwind tables, and stack copies until a
// binary's table is loaded.
func recordDefaults() pipeline.Config {
	var f samplingFlags
	f.add(pflag.NewFlagSet("record", pflag.ContinueOnError), collector.DefaultUnwindCacheBytes, "")
	return f.config(defaultFrequency)
}

// offCPULine reports whether --off-cpu works: feats nil means not probed,
// err is bpf.ProbeOffCPU's.
func offCPULine(feats *bpf.Features, err error) checkLine {
	const item = "off-CPU"
	switch {
	case feats == nil:
		return checkLine{statusSkip, item, "not probed without privileges", ""}
	case err == nil:
		return checkLine{statusOK, item, "available: --off-cpu records where threads wait, from the BTF tracepoints sched_switch and sys_exit", ""}
	case errors.Is(err, ebpf.ErrNotSupported):
		return checkLine{statusWarn, item, "--off-cpu is not available: " + err.Error(), "a Linux 5.10 or newer kernel with BTF"}
	}
	return checkLine{statusWarn, item, "--off-cpu probe failed: " + err.Error(), probeFailedFix}
}
