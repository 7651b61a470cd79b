package bpf

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestSampleInExecve: a sample taken in execve has no user stack and is
// marked truncated. Once the new program's memory has replaced the old
// one's, the user registers are still the old program's and its stack is
// gone: before, such samples carried the old pc, which user space named in
// the new program, and whatever the walk read at the old addresses. A
// shell script execs itself over and over (through the kernel's #! and ELF
// loaders); its samples in the ELF loader are checked, on every kernel
// path. (execve's first steps, before it loads the new program, run under
// the old program's memory, and a sample there may keep its stack.)
func TestSampleInExecve(t *testing.T) {
	requireBPF(t)
	script := filepath.Join(t.TempDir(), "chain")
	if err := os.WriteFile(script, []byte("#!/bin/sh\n[ \"$1\" -gt 0 ] && exec \"$0\" $(($1 - 1))\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	loader := kernelSymbols(t, "load_elf_binary")
	onEveryPath(t, func(t *testing.T, features *Features) {
		cmd, _ := startBinary(t, script, "1000000")
		pid := uint32(cmd.Process.Pid)
		s := openSampler(t, Config{Frequency: 999, Pids: []uint32{pid}, User: true, Kernel: true, features: features})
		got := collectN(t, s, 10, func(x *Sample) bool {
			return x.Pid == pid && slices.ContainsFunc(x.Kernel, loader.contains)
		})
		if len(got) < 10 {
			t.Fatalf("%d samples in the ELF loader, want ≥ 10", len(got))
		}
		for _, x := range got {
			if len(x.user) != 0 || !x.UserTruncated {
				t.Fatalf("a sample in the ELF loader: user stack %s, truncated %v; want none, truncated", hexFrames(x.user), x.UserTruncated)
			}
		}
	})
}
