// Package container finds the container a process runs in from its
// /proc/PID/cgroup file, without asking a container runtime.
//
// SREs read host-wide profiles by workload, and on a container host the
// workload is the container, not the command: two "nginx" processes may
// belong to two different services. The runtimes that matter all put a
// container's processes in a cgroup whose name carries the container's ID,
// so one small read per process tells them apart, with no socket to the
// runtime, no API version and nothing to configure. Names (a Docker
// container's name, a pod's) need the runtime's API; the ID is what every
// runtime's tools (docker ps --no-trunc, crictl ps, podman ps) show and
// accept.
//
// Recognised cgroup names, under cgroup v2 (the `0::` line) and v1 alike:
//
//   - Docker: `docker-ID.scope` (systemd driver), `/docker/ID` (cgroupfs)
//   - containerd through CRI: `cri-containerd-ID.scope`
//   - CRI-O: `crio-ID.scope`
//   - Podman: `libpod-ID.scope`, `/libpod_parent/libpod-ID`
//   - Kubernetes' cgroupfs driver: `/kubepods[/burstable|/besteffort]/podUID/ID`
//
// where ID is 64 hexadecimal digits. Anything else — system services, user
// sessions, the monitors conmon runs in (`libpod-conmon-ID.scope`) — is in
// no container. The innermost container wins when containers nest.
package container
