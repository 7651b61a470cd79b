package container

import (
	"os"
	"os/exec"
	"testing"

	"github.com/sprof/sprof/collector/container/containertest"
)

const (
	id1 = "4f797c539e6c745de61a93ca3ff892358ecbcaccd8414d5db545c38428142970"
	id2 = "9ec39b91f3d70e1beff50a308f77067065ea6be0d91a3378375056cd4422cf3d"
)

// TestFromCgroup reads /proc/PID/cgroup files shaped as the runtimes and
// drivers write them.
func TestFromCgroup(t *testing.T) {
	for _, tc := range []struct {
		name, cgroup, want string
	}{
		{"docker, cgroup v2, systemd driver", "0::/system.slice/docker-" + id1 + ".scope\n", id1},
		{"docker, cgroup v2, cgroupfs driver", "0::/docker/" + id1 + "\n", id1},
		{"docker, cgroup v1, cgroupfs driver", "12:pids:/docker/" + id1 + "\n11:cpuset:/docker/" + id1 +
			"\n4:cpu,cpuacct:/docker/" + id1 + "\n1:name=systemd:/docker/" + id1 + "\n0::/\n", id1},
		{"docker, cgroup v1, systemd driver", "10:devices:/system.slice/docker-" + id2 + ".scope\n" +
			"2:cpuacct,cpu:/system.slice/docker-" + id2 + ".scope\n1:name=systemd:/system.slice/docker-" + id2 + ".scope\n", id2},
		{"docker, upper-case hex", "0::/system.slice/docker-" + "4F797C539E6C745DE61A93CA3FF892358ECBCACCD8414D5DB545C38428142970" + ".scope\n", id1},
		{"kubernetes systemd driver, containerd, burstable", "0::/kubepods.slice/kubepods-burstable.slice/" +
			"kubepods-burstable-pod1f0b6b3e_6a3c_4bb8_8a8b_3c1a5e0f6d21.slice/cri-containerd-" + id1 + ".scope\n", id1},
		{"kubernetes systemd driver, containerd, besteffort", "0::/kubepods.slice/kubepods-besteffort.slice/" +
			"kubepods-besteffort-pod7d3c9a47_0c7b_4e0e_9d65_8b4a2f1e9c10.slice/cri-containerd-" + id2 + ".scope\n", id2},
		{"kubernetes systemd driver, containerd, guaranteed", "0::/kubepods.slice/" +
			"kubepods-pod7d3c9a47_0c7b_4e0e_9d65_8b4a2f1e9c10.slice/cri-containerd-" + id2 + ".scope\n", id2},
		{"kubernetes systemd driver, CRI-O, burstable", "0::/kubepods.slice/kubepods-burstable.slice/" +
			"kubepods-burstable-pod1f0b6b3e_6a3c_4bb8_8a8b_3c1a5e0f6d21.slice/crio-" + id1 + ".scope\n", id1},
		{"kubernetes systemd driver, dockershim, cgroup v1", "11:memory:/kubepods.slice/kubepods-besteffort.slice/" +
			"kubepods-besteffort-pod1f0b6b3e_6a3c_4bb8_8a8b_3c1a5e0f6d21.slice/docker-" + id1 + ".scope\n", id1},
		{"kubernetes cgroupfs driver, burstable", "0::/kubepods/burstable/pod1f0b6b3e-6a3c-4bb8-8a8b-3c1a5e0f6d21/" + id1 + "\n", id1},
		{"kubernetes cgroupfs driver, besteffort, cgroup v1", "12:cpu,cpuacct:/kubepods/besteffort/pod7d3c9a47-0c7b-4e0e-9d65-8b4a2f1e9c10/" + id2 +
			"\n1:name=systemd:/kubepods/besteffort/pod7d3c9a47-0c7b-4e0e-9d65-8b4a2f1e9c10/" + id2 + "\n", id2},
		{"kubernetes cgroupfs driver, guaranteed", "0::/kubepods/pod7d3c9a47-0c7b-4e0e-9d65-8b4a2f1e9c10/" + id2 + "\n", id2},
		{"podman, systemd driver", "0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" + id1 + ".scope\n", id1},
		{"podman with its own cgroup namespace", "0::/machine.slice/libpod-" + id2 + ".scope/container\n", id2},
		{"podman, cgroupfs driver", "0::/libpod_parent/libpod-" + id1 + "\n", id1},
		{"a cgroup namespace above the container", "0::/../../kubepods.slice/kubepods-burstable.slice/" +
			"kubepods-burstable-pod1f0b6b3e_6a3c_4bb8_8a8b_3c1a5e0f6d21.slice/cri-containerd-" + id1 + ".scope\n", id1},
		{"nested: the innermost container", "0::/system.slice/docker-" + id1 + ".scope/docker/" + id2 + "\n", id2},
		{"hybrid v1 and v2, v2 line uninformative", "1:name=systemd:/docker/" + id1 + "\n0::/\n", id1},

		{"systemd service", "0::/system.slice/nginx.service\n", ""},
		{"systemd user session", "0::/user.slice/user-1000.slice/session-3.scope\n", ""},
		{"systemd user service", "0::/user.slice/user-1000.slice/user@1000.service/app.slice/dbus.service\n", ""},
		{"transient unit of systemd-run", "0::/system.slice/run-r0d9c3c5ba1e54f6f8f2d2b8f52a4f3a1.scope\n", ""},
		{"cgroup v1 services", "12:pids:/system.slice/sshd.service\n1:name=systemd:/system.slice/sshd.service\n", ""},
		{"root cgroup", "0::/\n", ""},
		{"init.scope", "0::/init.scope\n", ""},
		{"podman's monitor", "0::/machine.slice/libpod-conmon-" + id1 + ".scope\n", ""},
		{"CRI-O's monitor", "0::/system.slice/crio-conmon-" + id1 + ".scope\n", ""},
		{"the docker daemon", "0::/system.slice/docker.service\n", ""},
		{"a 64-digit cgroup under no runtime", "0::/system.slice/" + id1 + "\n", ""},
		{"a pod cgroup outside kubepods", "0::/pods/pod1f0b6b3e/" + id1 + "\n", ""},
		{"the pod cgroup itself", "0::/kubepods/burstable/pod1f0b6b3e-6a3c-4bb8-8a8b-3c1a5e0f6d21\n", ""},
		{"too short an ID", "0::/system.slice/docker-" + id1[:63] + ".scope\n", ""},
		{"not hex", "0::/system.slice/docker-" + id1[:63] + "g.scope\n", ""},
		{"empty file", "", ""},
		{"no path", "0:\n", ""},
		{"no newline at the end", "0::/docker/" + id1, id1},
		{"a path with colons", "0::/odd:name/docker/" + id1 + "\n", id1},
	} {
		if got := FromCgroup([]byte(tc.cgroup)); got != tc.want {
			t.Errorf("%s: %q; want %q", tc.name, got, tc.want)
		}
	}
}

// TestFromCgroupSelf reads this process's own cgroup file, whatever it
// says: the parser must accept what the running kernel writes.
func TestFromCgroupSelf(t *testing.T) {
	id, err := OfProcess("/proc", uint32(os.Getpid()))
	if err != nil {
		t.Fatalf("read this process's cgroup: %v", err)
	}
	t.Logf("this test runs in container %q", id)
	if id != "" && (len(id) != idLen || !isID(id)) {
		t.Errorf("container ID %q", id)
	}
}

// BenchmarkFromCgroup parses a Kubernetes pod's cgroup v1 file, the
// longest shape: what the first sighting of a process costs on top of the
// read itself.
func BenchmarkFromCgroup(b *testing.B) {
	var cg []byte
	for _, c := range []string{"12:pids", "11:memory", "10:devices", "9:cpu,cpuacct", "8:blkio", "1:name=systemd"} {
		cg = append(cg, c+":/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1f0b6b3e_6a3c_4bb8_8a8b_3c1a5e0f6d21.slice/cri-containerd-"+id1+".scope\n"...)
	}
	cg = append(cg, "0::/\n"...)
	b.ReportAllocs()
	for b.Loop() {
		if FromCgroup(cg) != id1 {
			b.Fatal("no ID")
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/process")
}

// TestOfProcessInCgroup moves a child into a cgroup named as Docker names a
// container's, so that the kernel writes the line OfProcess reads, and
// checks the child is found in the container and this process is not.
func TestOfProcessInCgroup(t *testing.T) {
	cg := containertest.New(t)
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	self, err := OfProcess("/proc", uint32(os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	cg.Add(t, cmd.Process.Pid)
	got, err := OfProcess("/proc", uint32(cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if got != cg.ID || self == cg.ID {
		t.Errorf("the child is in container %q, this test in %q; want %q and another", got, self, cg.ID)
	}
	if _, err := OfProcess("/proc", 0); err == nil {
		t.Error("OfProcess of pid 0 succeeded")
	}
}

// BenchmarkOfProcess reads and parses this process's cgroup file: what
// the collector pays once per process.
func BenchmarkOfProcess(b *testing.B) {
	pid := uint32(os.Getpid())
	for b.Loop() {
		if _, err := OfProcess("/proc", pid); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/process")
}
