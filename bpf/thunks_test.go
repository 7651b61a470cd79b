package bpf

import (
	"os"
	"path/filepath"
	"testing"
)

// returnThunks says yes for each mitigation that installs a return thunk,
// in the words Linux's arch/x86/kernel/cpu/bugs.c writes to the files (and
// wrote before 6.7 renamed SRSO's), and no for the others, for a missing
// directory and for files it does not read.
func TestReturnThunks(t *testing.T) {
	for _, tc := range []struct {
		file, text string
		want       bool
	}{
		{"retbleed", "Mitigation: untrained return thunk; SMT enabled with STIBP protection", true},
		{"retbleed", "Mitigation: Stuffing", true},
		{"retbleed", "Mitigation: IBPB", false},
		{"retbleed", "Mitigation: Enhanced IBRS", false},
		{"retbleed", "Not affected", false},
		{"spec_rstack_overflow", "Mitigation: Safe RET", true},
		{"spec_rstack_overflow", "Vulnerable: Safe RET, no microcode", true},
		{"spec_rstack_overflow", "Vulnerable: Microcode, no safe RET", false},
		{"spec_rstack_overflow", "Mitigation: safe RET", true},               // before Linux 6.7
		{"spec_rstack_overflow", "Mitigation: safe RET, no microcode", true}, // before Linux 6.7
		{"spec_rstack_overflow", "Mitigation: microcode", false},             // before Linux 6.7
		{"spec_rstack_overflow", "Mitigation: IBPB on VMEXIT only", false},
		{"spec_rstack_overflow", "Mitigation: IBPB", false},
		{"indirect_target_selection", "Mitigation: Aligned branch/return thunks", true},
		{"indirect_target_selection", "Mitigation: Retpolines, Stuffing RSB", true},
		{"indirect_target_selection", "Not affected", false},
		{"spectre_v2", "Mitigation: Retpolines; STIBP: disabled; RSB filling", false}, // not a return thunk, and not read
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, tc.file), []byte(tc.text+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := returnThunks(dir); got != tc.want {
			t.Errorf("%s: %q: returnThunks = %v, want %v", tc.file, tc.text, got, tc.want)
		}
	}
	if returnThunks(filepath.Join(t.TempDir(), "none")) {
		t.Error("returnThunks of a missing directory = true")
	}
}
