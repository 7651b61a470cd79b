package proctime

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// CPU counts a spinning child's run time, which the kernel's own account
// of the reaped child (wait4's rusage) then covers; once the child is
// gone CPU fails rather than report a process that will run no more.
func TestCPU(t *testing.T) {
	spin := exec.Command("sh", "-c", "while :; do :; done")
	if err := spin.Start(); err != nil {
		t.Fatal(err)
	}
	defer spin.Process.Kill()
	pid := spin.Process.Pid
	Ran(t, pid, 50*time.Millisecond)
	last, err := CPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	if last < 50*time.Millisecond {
		t.Errorf("CPU %v after Ran(50ms)", last)
	}
	spin.Process.Kill()
	spin.Wait()
	if all := spin.ProcessState.UserTime() + spin.ProcessState.SystemTime(); all < last {
		t.Errorf("rusage says the child ran %v, less than the %v CPU read", all, last)
	}
	if d, err := CPU(pid); err == nil {
		t.Errorf("CPU of a reaped child: %v, want an error", d)
	}
	if d, err := CPU(os.Getpid()); err != nil || d <= 0 {
		t.Errorf("CPU of the test itself: %v, %v", d, err)
	}
}

// Until returns at once when the condition holds, whatever the budget.
func TestUntilHolds(t *testing.T) {
	calls := 0
	Until(t, os.Getpid(), 0, "nothing", func() bool { calls++; return true })
	if calls != 1 {
		t.Errorf("cond called %d times, want 1", calls)
	}
}
