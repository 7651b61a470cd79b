package bpf

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"

	"github.com/sprof/sprof/internal/testenv"
)

// bpftoolFeatures is the part of `bpftool -j feature probe kernel` the
// test compares with: bpftool is libbpf's own prober, written by the
// kernel's BPF maintainers, and probes each helper per program type.
type bpftoolFeatures struct {
	ProgramTypes map[string]bool     `json:"program_types"`
	MapTypes     map[string]bool     `json:"map_types"`
	Helpers      map[string][]string `json:"helpers"`
}

// TestProbeFeatures checks every probe against an oracle of its own:
// bpftool for program types, map types and perf_event helpers, the kernel's
// BTF for the tracepoint the sampler attaches to (bpftool 7.1 probes the
// tracing type without an attach target and reports it missing).
func TestProbeFeatures(t *testing.T) {
	testenv.RequireRoot(t)
	bpftool := testenv.RequireTool(t, "bpftool")
	out, err := exec.Command(bpftool, "-j", "feature", "probe", "kernel").Output()
	if err != nil {
		t.Fatalf("bpftool feature probe: %v", err)
	}
	var want bpftoolFeatures
	if err := json.Unmarshal(out, &want); err != nil {
		t.Fatalf("bpftool's JSON: %v", err)
	}
	perfHelpers := want.Helpers["perf_event_available_helpers"]
	spec, err := btf.LoadKernelSpec()
	if err != nil && !errors.Is(err, btf.ErrNotFound) {
		t.Fatal(err)
	}
	_, tpErr := spec.AnyTypeByName("btf_trace_sched_process_fork")
	_, btfErr := os.Stat("/sys/kernel/btf/vmlinux")

	oracle := map[Feature]bool{
		FeatureBTF:              btfErr == nil,
		FeaturePerfEvent:        want.ProgramTypes["have_perf_event_prog_type"],
		FeatureTracingBTF:       spec != nil && tpErr == nil,
		FeatureRingBuf:          want.MapTypes["have_ringbuf_map_type"],
		FeatureCurrentTaskBTF:   slices.Contains(perfHelpers, "bpf_get_current_task_btf"),
		FeatureAncestorCgroupID: slices.Contains(perfHelpers, "bpf_get_current_ancestor_cgroup_id"),
		FeatureTaskPtRegs:       slices.Contains(perfHelpers, "bpf_task_pt_regs"),
		FeatureLoop:             slices.Contains(perfHelpers, "bpf_loop"),
		FeatureFindVMA:          slices.Contains(perfHelpers, "bpf_find_vma"),
	}
	fs := ProbeFeatures()
	if len(oracle) != int(numFeatures) {
		t.Fatalf("the oracle covers %d of %d features", len(oracle), numFeatures)
	}
	for _, f := range AllFeatures() {
		err := fs.Err(f)
		if err != nil && !errors.Is(err, ebpf.ErrNotSupported) {
			t.Errorf("%s: inconclusive probe as root: %v", f, err)
		}
		if fs.Has(f) != oracle[f] {
			t.Errorf("%s: Has = %v, oracle says %v (probe: %v)", f, fs.Has(f), oracle[f], err)
		}
	}
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		t.Fatal(err)
	}
	if rel := unix.ByteSliceToString(uts.Release[:]); fs.Release != rel {
		t.Errorf("Release %q, uname says %q", fs.Release, rel)
	}
}

// TestTracingBTFProbedOnce: the BTF tracepoint's probe parses the
// kernel's BTF (a second of CPU in an emulated VM) and a recording asks
// for it three times, so its first answer as root is kept and given again.
func TestTracingBTFProbedOnce(t *testing.T) {
	requireBPF(t)
	first := ProbeFeatures().Err(FeatureTracingBTF)
	tracingBTF.mu.Lock()
	answered := tracingBTF.answered
	tracingBTF.mu.Unlock()
	if !answered {
		t.Fatalf("the BTF tracepoint's probe kept no answer as root (it said %v)", first)
	}
	if again := ProbeFeatures().Err(FeatureTracingBTF); again != first {
		t.Errorf("probed again: %v, then %v", first, again)
	}
}

// Without privileges no probe but BTF's can conclude, and none may claim
// the feature is missing: that would send the user upgrading a kernel that
// is fine. The test reruns itself as nobody.
func TestProbeFeaturesUnprivileged(t *testing.T) {
	if os.Getenv("SPROF_FEATURES_CHILD") == "1" {
		fs := ProbeFeatures()
		for _, f := range AllFeatures() {
			err := fs.Err(f)
			if f == FeatureBTF {
				continue
			}
			if err == nil || errors.Is(err, ebpf.ErrNotSupported) || !errors.Is(err, unix.EPERM) {
				t.Errorf("%s as nobody: %v; want an EPERM error", f, err)
			}
		}
		if err := fs.Check(); !errors.Is(err, ErrPermission) {
			t.Errorf("Check as nobody: %v; want ErrPermission", err)
		}
		return
	}
	testenv.RequireRoot(t)
	bin := testenv.UnprivilegedCopy(t)
	cmd := exec.Command(testenv.RequireTool(t, "setpriv"), "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
		bin, "-test.run=^TestProbeFeaturesUnprivileged$", "-test.v")
	cmd.Env = append(os.Environ(), "SPROF_FEATURES_CHILD=1")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "--- PASS") {
		t.Fatalf("rerun as nobody: %v\n%s", err, out)
	}
}

func TestFeatureNames(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range AllFeatures() {
		if f.String() == "" || f.Since() == "" || f.Use() == "" || seen[f.String()] {
			t.Errorf("feature %d: name %q since %q use %q (names must be unique)", int(f), f, f.Since(), f.Use())
		}
		seen[f.String()] = true
	}
	if got := Feature(-1).String(); got != "Feature(-1)" {
		t.Errorf("Feature(-1) = %q", got)
	}
}

// TestProbeOffCPU holds the off-CPU probe to the kernel's BTF: the
// tracepoints offcpu.bpf.c attaches to are there as btf_trace_ typedefs,
// and bpf_get_task_stack (5.9) in the kernel's enum of helpers. A
// tracepoint or a helper the kernel lacks must come out as not supported,
// not as a failure to probe.
func TestProbeOffCPU(t *testing.T) {
	testenv.RequireRoot(t)
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		t.Fatalf("kernel BTF: %v", err)
	}
	want := true
	for _, name := range []string{"btf_trace_sched_switch", "btf_trace_sys_exit"} {
		if _, err := spec.AnyTypeByName(name); err != nil {
			t.Logf("kernel BTF has no %s: %v", name, err)
			want = false
		}
	}
	var ids *btf.Enum
	if err := spec.TypeByName("bpf_func_id", &ids); err != nil {
		t.Fatalf("kernel BTF has no enum bpf_func_id: %v", err)
	}
	if !slices.ContainsFunc(ids.Values, func(v btf.EnumValue) bool { return v.Name == "BPF_FUNC_get_task_stack" }) {
		t.Log("kernel BTF's enum bpf_func_id has no BPF_FUNC_get_task_stack")
		want = false
	}
	if err := ProbeOffCPU(); (err == nil) != want || (err != nil && !errors.Is(err, ebpf.ErrNotSupported)) {
		t.Errorf("ProbeOffCPU: %v; the kernel's BTF says available = %v", err, want)
	}
	if err := probeTracepointBTF("sprof_no_such_tracepoint"); !errors.Is(err, ebpf.ErrNotSupported) {
		t.Errorf("a tracepoint the kernel lacks: %v, want ErrNotSupported", err)
	}
	if err := probeTracepointBTF("sched_switch", asm.BuiltinFunc(1<<20).Call()); !errors.Is(err, ebpf.ErrNotSupported) {
		t.Errorf("a helper the kernel lacks: %v, want ErrNotSupported", err)
	}
}
