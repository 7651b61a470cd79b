package bpf

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
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

// TestOffCPUInExecve: an off-CPU wait inside an execve that succeeds has no
// user stack and is marked truncated. The off-CPU program finishes such a
// record when the call returns, where the thread is at the new program's
// entry: before, the wait was shown under the new program's _start. A
// multi-threaded process (a copy of this test binary with four threads of
// its own besides Go's) execs itself over and over; each execve waits in
// the kernel while the process's other threads die.
func TestOffCPUInExecve(t *testing.T) {
	if n := os.Getenv("SPROF_BPF_EXEC_CHILD"); n != "" {
		execAgain(t, n)
		return
	}
	requireBPF(t)
	const execs = 20
	child := exec.Command(os.Args[0], "-test.run=^TestOffCPUInExecve$")
	child.Env = append(os.Environ(), fmt.Sprintf("SPROF_BPF_EXEC_CHILD=%d", execs), "SPROF_BPF_EXEC_WAIT=1")
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		child.Process.Kill()
		child.Wait()
	})
	pid := uint32(child.Process.Pid)
	s := openSampler(t, Config{Frequency: 99, Pids: []uint32{pid}, User: true, Kernel: true, OffCPU: true, OffCPUMin: 1, OffCPUExitBudget: -1})
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	if err := child.Wait(); err != nil {
		t.Fatalf("the exec chain: %v", err)
	}
	inExec := kernelSymbols(t, "load_elf_binary", "bprm_execve", "do_execveat_common")
	waits := 0
	for _, x := range collect(t, s, 0, func(x *Sample) bool { return x.Pid == pid && x.OffCPU != 0 }) {
		if !slices.ContainsFunc(x.kernel, inExec.contains) {
			continue
		}
		waits++
		if len(x.user) != 0 || !x.UserTruncated {
			t.Errorf("a wait of %d ns in execve: user stack %s, truncated %v; want none, truncated", x.OffCPU, hexFrames(x.user), x.UserTruncated)
		}
	}
	t.Logf("%d off-CPU records in execve for %d execs", waits, execs)
	if waits < execs/2 {
		t.Fatalf("%d off-CPU records in execve for %d execs of a multi-threaded process, want %d or more", waits, execs, execs/2)
	}
}

// execAgain is TestOffCPUInExecve's child: with SPROF_BPF_EXEC_WAIT set it
// waits for a line on stdin first; then, with four threads of its own
// blocked, it execs itself with n one less, until n is 0.
func execAgain(t *testing.T, n string) {
	left, err := strconv.Atoi(n)
	if err != nil {
		t.Fatal(err)
	}
	if left == 0 {
		return
	}
	if os.Getenv("SPROF_BPF_EXEC_WAIT") != "" {
		if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	started := make(chan struct{})
	for range 4 {
		go func() {
			runtime.LockOSThread()
			started <- struct{}{}
			select {}
		}()
	}
	for range 4 {
		<-started
	}
	env := slices.DeleteFunc(os.Environ(), func(v string) bool {
		return strings.HasPrefix(v, "SPROF_BPF_EXEC_CHILD=") || strings.HasPrefix(v, "SPROF_BPF_EXEC_WAIT=")
	})
	env = append(env, fmt.Sprintf("SPROF_BPF_EXEC_CHILD=%d", left-1))
	t.Fatal(syscall.Exec(os.Args[0], os.Args, env))
}
