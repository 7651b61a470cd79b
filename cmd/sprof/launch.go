package main

import (
	"fmt"
	"os"
	"os/exec"

	"golang.org/x/sys/unix"
)

// launcherArg marks sprof's re-execution of itself as the launcher of a
// profiled command. The kernel's pid filter must hold the command's pid
// before the command runs its first instruction, but Go cannot pause between
// fork and exec. So sprof starts itself as the launcher, which waits on a
// pipe; sprof puts the launcher's pid in the filter, closes the pipe, and the
// launcher execs the command in place — same pid, nothing missed.
const launcherArg = "__sprof-launch"

// launched is a command started paused by startPaused.
type launched struct {
	cmd     *exec.Cmd
	release *os.File
}

// startPaused starts argv as a child that waits to be released before it
// execs. Its stdio are sprof's.
func startPaused(argv []string) (*launched, error) {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return nil, fmt.Errorf("command %q: %w", argv[0], err)
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find sprof's own executable: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := exec.Command(self, append([]string{launcherArg, path}, argv...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{r} // fd 3 in the child
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	return &launched{cmd: cmd, release: w}, nil
}

// Pid is the pid the command will run as.
func (l *launched) Pid() int { return l.cmd.Process.Pid }

// Release lets the command exec.
func (l *launched) Release() error { return l.release.Close() }

// Abort kills a command that was never released.
func (l *launched) Abort() {
	l.cmd.Process.Kill()
	l.release.Close()
	l.cmd.Wait()
}

// runLauncher is the child side: wait for the release (EOF on fd 3), then
// become the command. It returns only on failure.
func runLauncher(args []string) int {
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "sprof: launcher needs a path and argv")
		return 127
	}
	release := os.NewFile(3, "release")
	var b [1]byte
	release.Read(b[:]) // returns at EOF, when sprof closes its end
	release.Close()
	err := unix.Exec(args[0], args[1:], os.Environ())
	fmt.Fprintf(os.Stderr, "sprof: exec %s: %v\n", args[1], err)
	return 127
}
