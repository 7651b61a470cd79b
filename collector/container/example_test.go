package container_test

import (
	"fmt"

	"github.com/sprof/sprof/collector/container"
)

func ExampleFromCgroup() {
	// A container of a Kubernetes pod, run by containerd under the
	// systemd cgroup driver.
	cgroup := "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1f0b6b3e_6a3c_4bb8_8a8b_3c1a5e0f6d21.slice/" +
		"cri-containerd-4f797c539e6c745de61a93ca3ff892358ecbcaccd8414d5db545c38428142970.scope\n"
	fmt.Println(container.FromCgroup([]byte(cgroup)))
	// A system service: no container.
	fmt.Printf("%q\n", container.FromCgroup([]byte("0::/system.slice/nginx.service\n")))
	// Output:
	// 4f797c539e6c745de61a93ca3ff892358ecbcaccd8414d5db545c38428142970
	// ""
}
