package container

import (
	"strings"
	"testing"
)

// FuzzFromCgroup feeds arbitrary cgroup files to the parser, which must not
// panic and must return either nothing or a 64-digit lower-case hex ID that
// the file holds.
func FuzzFromCgroup(f *testing.F) {
	f.Add([]byte("0::/system.slice/docker-" + id1 + ".scope\n"))
	f.Add([]byte("0::/kubepods/burstable/pod1f0b6b3e/" + id2 + "\n1:name=systemd:/\n"))
	f.Add([]byte("0::/machine.slice/libpod-" + id1 + ".scope/container\n"))
	f.Add([]byte("::::\n:\n\n/docker/" + id1))
	f.Add([]byte("0::" + strings.Repeat("/", 300) + "docker-\x00\xff.scope"))
	f.Fuzz(func(t *testing.T, b []byte) {
		id := FromCgroup(b)
		if id == "" {
			return
		}
		if len(id) != idLen || strings.ToLower(id) != id || !isID(id) {
			t.Fatalf("ID %q", id)
		}
		if !strings.Contains(strings.ToLower(string(b)), id) {
			t.Fatalf("ID %q is not in the file", id)
		}
	})
}
