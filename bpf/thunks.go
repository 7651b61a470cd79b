package bpf

import (
	"os"
	"path/filepath"
	"strings"
)

// vulnerabilitiesDir is where Linux says how it mitigates each CPU
// vulnerability, a file per vulnerability.
const vulnerabilitiesDir = "/sys/devices/system/cpu/vulnerabilities"

// returnThunks reports whether the kernel whose vulnerability files lie in
// dir returns from functions through a thunk, its BPF programs too, which
// makes the calls of a bpf_loop callback dear: the sampler then batches
// the walks' steps (batched_steps in sprof.bpf.c says what that saves and
// costs). The mitigations that install a return thunk name it in their
// files (arch/x86/kernel/cpu/bugs.c): Retbleed's "untrained return thunk"
// and "Stuffing" (call depth tracking), SRSO's safe RET ("Mitigation: Safe
// RET", "Vulnerable: Safe RET, no microcode"; before Linux 6.7 "Mitigation:
// safe RET" and "Mitigation: safe RET, no microcode"; not "Vulnerable:
// Microcode, no safe RET"), and ITS's "Aligned branch/return thunks" and
// "Stuffing RSB". A missing or unreadable file is no thunk: the files exist
// only on x86, and since Linux 4.15.
func returnThunks(dir string) bool {
	for _, name := range []string{"retbleed", "spec_rstack_overflow", "indirect_target_selection"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			continue
		}
		s := strings.ToLower(string(b))
		if strings.Contains(s, "return thunk") || strings.Contains(s, "stuffing") {
			return true
		}
		if i := strings.Index(s, "safe ret"); i >= 0 && !strings.HasSuffix(s[:i], "no ") {
			return true
		}
	}
	return false
}
