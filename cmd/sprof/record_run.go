package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sprof/sprof/bpf"
	"github.com/sprof/sprof/collector"
	"github.com/sprof/sprof/exporters"
	"github.com/sprof/sprof/internal/outfile"
	"github.com/sprof/sprof/pipeline"
)

func runRecord(e *env, args []string) error {
	o, err := parseRecord(e, args)
	if err != nil {
		return err
	}
	var cgroupID uint64
	if o.cgroup != "" {
		if cgroupID, err = cgroupIDOf(o.cgroup); err != nil {
			return usagef("--cgroup: %v", err)
		}
	}
	// Without privileges, BTF or BPF nothing else matters, not even an
	// output path this user cannot write: say only that.
	if err := bpf.CheckHost(); err != nil {
		return err
	}
	// Open the output first: a path that cannot be written is better
	// reported before the recording than after it. A .sprof recording is
	// written as the samples come (see recordingFile), a profile at the end.
	out, err := outfile.Create(o.output, e.stdout)
	if err != nil {
		return err
	}
	defer out.Abort()
	var rec *recordingFile
	if o.format == formatRecording {
		if rec, err = newRecording(out, o.frequency); err != nil {
			return err
		}
		defer rec.abort()
	}

	ctx, names, stopSignals := stopOnSignal()
	defer stopSignals()

	pids, follow := o.pids, false
	var cmd *launched
	if len(o.command) > 0 {
		if cmd, err = startPaused(o.command); err != nil {
			return err
		}
		defer func() {
			if cmd != nil {
				cmd.Abort()
			}
		}()
		pids, follow = []uint32{uint32(cmd.Pid())}, true
	}

	// Warnings about what sprof will do without wait until the sampler
	// is open: when it cannot open, its error is the one thing to say.
	var warnings bytes.Buffer
	hz := o.frequency
	if !o.cpu {
		hz = 0 // off-CPU records only
	}
	cfg := o.sampling.config(hz)
	cfg.RunTimeStats = o.stats
	cfg.Pids, cfg.Command, cfg.CgroupID, cfg.IncludeIdle = pids, follow, cgroupID, o.includeIdle
	cfg.Symbolizer = o.symbolizer.newSymbolizer(&env{e.stdin, e.stdout, &warnings}, "record")
	cfg.UnwindStore = o.symbolizer.unwindStore(&env{e.stdin, e.stdout, &warnings}, "record")
	if rec != nil {
		cfg.Sink = rec
	}
	pipe, err := pipeline.Open(cfg)
	if err != nil {
		return err
	}
	defer pipe.Close()
	if pipe.KernelErr != nil {
		fmt.Fprintf(e.stderr, "sprof record: kernel frames stay unnamed: %v\n", pipe.KernelErr)
	}
	if pipe.Limits != "" {
		fmt.Fprintf(e.stderr, "sprof record: %s\n", pipe.Limits)
	}
	if pipe.TablesErr != nil {
		fmt.Fprintf(e.stderr, "sprof record: %s: %v\n", tablesFallback, pipe.TablesErr)
	}
	if rec != nil {
		// Sampling runs: from now on a kill leaves the recording at
		// its path, and a write error (a full disk) ends it.
		if err := out.Publish(); err != nil {
			return err
		}
		var failed context.CancelCauseFunc
		ctx, failed = context.WithCancelCause(ctx)
		defer failed(nil)
		rec.failed = failed
	}
	e.stderr.Write(warnings.Bytes())
	fmt.Fprintf(e.stderr, "sprof: %s%s; Ctrl-C to stop\n", recordingWhat(o, target(o, cmd)), untilText(o))
	if o.duration > 0 { // counted from the first sample, not from start-up
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.duration)
		defer cancel()
	}

	var exited <-chan struct{}
	var cmdErr error
	var cmdProc *os.Process
	if cmd != nil {
		if err := cmd.Release(); err != nil {
			return fmt.Errorf("start %s: %w", o.command[0], err)
		}
		done := make(chan struct{})
		exited = done
		cmdProc = cmd.cmd.Process
		c := cmd
		cmd = nil // released: from now on it runs its course
		go func() {
			cmdErr = c.cmd.Wait()
			close(done)
		}()
	} else if len(o.pids) > 0 {
		// Like perf record -p, end when the processes have all exited.
		var stopWatching func()
		if exited, stopWatching, err = watchExits(o.pids); err != nil {
			return err
		}
		defer stopWatching()
	}

	prof, stats, err := pipe.Run(ctx, names, exited)
	if err != nil {
		return err
	}

	if rec != nil {
		err = rec.close(stats.Lost)
		if werr := out.Err(); werr != nil {
			// Say what was kept; a command recorded is told to end,
			// as perf tells it when it stops.
			if cmdProc != nil {
				cmdProc.Signal(syscall.SIGTERM)
			}
			return fmt.Errorf("%w; the recording ended then, after %.1fs, and is readable up to there", werr,
				stats.Duration.Seconds())
		}
	} else if err = exporters.Write(out, prof, o.format, o.export); err == nil {
		err = out.Commit()
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "sprof: recorded %.1fs, %s, %d lost, %s; wrote %s (%s)\n",
		stats.Duration.Seconds(), count(stats.Samples, "sample", "samples"), stats.Lost,
		count(stats.Processes, "process", "processes"), out.Name(), o.format)
	if hint := lossHint(stats.Samples, stats.Lost); hint != "" {
		fmt.Fprintf(e.stderr, "sprof: %s\n", hint)
	}
	if stats.Errors > 0 {
		fmt.Fprintf(e.stderr, "sprof: %d records could not be read and were skipped; first: %v\n", stats.Errors, stats.Err)
	}
	if stats.Sideband != nil {
		fmt.Fprintf(e.stderr, "sprof: processes that exited between reads may be unattributed: %v\n", stats.Sideband)
	}
	if o.stats {
		bpfStats, bpfErr := pipe.SamplerStats()
		printStats(e, stats, bpfStats, bpfErr)
		printKernelUnwind(e, pipe.UnwindStats())
	}
	if o.sampling.debugUnwind {
		us := pipe.UnwindStats()
		if err := us.WriteText(e.stderr); err != nil {
			return err
		}
	}
	if cmdProc != nil {
		// The profile is written: a second Ctrl-C may end sprof now.
		stopSignals()
		select {
		case <-exited:
		default:
			// Stopped early: pass the signal on rather than wait for a
			// command that may never have been told (a Ctrl-C in a
			// terminal reaches it too, and it has mostly exited by now).
			// os.Process signals by pidfd, so a reused pid is safe.
			// After -d the command runs on to its end.
			var sig stopSignal
			if errors.As(context.Cause(ctx), &sig) {
				fmt.Fprintf(e.stderr, "sprof: sending %v to %s (pid %d) and waiting for it to exit\n", sig.Signal, o.command[0], cmdProc.Pid)
				cmdProc.Signal(sig.Signal)
			}
			<-exited
		}
		var ee *exec.ExitError
		if errors.As(cmdErr, &ee) {
			// Exit as the command did, as perf does, so that a script
			// that profiles a step still sees the step fail.
			fmt.Fprintf(e.stderr, "sprof: %s exited with %v\n", o.command[0], ee.ProcessState)
			return exitStatusOf(ee.ProcessState)
		}
	}
	return nil
}

// exitStatusOf returns the status a shell gives a command that ended as
// ps did: its exit code, or 128 plus the signal that killed it.
func exitStatusOf(ps *os.ProcessState) error {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return exitStatus(128 + int(ws.Signal()))
	}
	return exitStatus(ps.ExitCode())
}

// stopSignal is why a recording ended early: sprof got SIGINT, SIGTERM or
// SIGHUP.
type stopSignal struct{ os.Signal }

func (s stopSignal) Error() string { return "stopped by " + s.Signal.String() }

// stopOnSignal returns a context cancelled, with a stopSignal as its cause,
// when sprof gets SIGINT, SIGTERM or SIGHUP, a second one cancelled at the
// second such signal (naming frames then stops: the profile is written at
// once, frames not named yet as binary+offset), and a function that
// restores the signals' default action. SIGHUP is what a dropped SSH
// session sends `sprof record -d 10m`: it ends the recording and writes
// it, as Ctrl-C does. Until then SIGPIPE is caught too: a write to a
// closed stderr or standard output fails with EPIPE rather than killing
// sprof with its output half written. (Caught, not ignored: a command
// sprof starts gets the default action back on exec.)
func stopOnSignal() (stop, names context.Context, restore func()) {
	stop, cancel := context.WithCancelCause(context.Background())
	names, cancelNames := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	pipes := make(chan os.Signal, 1)
	signal.Notify(pipes, syscall.SIGPIPE)
	done := make(chan struct{})
	go func() {
		defer cancelNames()
		select {
		case s := <-sigs:
			cancel(stopSignal{s})
		case <-done:
			return
		}
		select {
		case <-sigs:
		case <-done:
		}
	}()
	var once sync.Once
	return stop, names, func() {
		once.Do(func() {
			signal.Stop(sigs)
			signal.Stop(pipes)
			close(done)
		})
	}
}

// recordingWhat says what record does to what (target's words).
func recordingWhat(o *recordOptions, what string) string {
	switch {
	case o.sampling.offCPU && o.cpu:
		return fmt.Sprintf("sampling %s at %d Hz and recording its waits off the CPU of %v or more", what, o.frequency, o.sampling.offCPUMin)
	case o.sampling.offCPU:
		return fmt.Sprintf("recording the waits off the CPU of %v or more of %s", o.sampling.offCPUMin, what)
	}
	return fmt.Sprintf("sampling %s at %d Hz", what, o.frequency)
}

// target says in words what is being sampled.
func target(o *recordOptions, cmd *launched) string {
	what := "all processes"
	switch {
	case cmd != nil:
		what = fmt.Sprintf("%s (pid %d) and its children", o.command[0], cmd.Pid())
	case len(o.pids) == 1:
		what = fmt.Sprintf("pid %d", o.pids[0])
	case len(o.pids) > 1:
		what = fmt.Sprintf("%d processes", len(o.pids))
	}
	if o.cgroup != "" {
		what += " in cgroup " + o.cgroup
	}
	switch {
	case o.sampling.userOnly:
		what += ", user stacks"
	case o.sampling.kernelOnly:
		what += ", kernel stacks"
	}
	return what
}

func untilText(o *recordOptions) string {
	if o.duration > 0 {
		return " for " + o.duration.String()
	}
	return ""
}

func printStats(e *env, s collector.Stats, b bpf.Stats, bpfErr error) {
	if bpfErr != nil {
		fmt.Fprintf(e.stderr, "sprof: BPF run-time statistics unavailable: %v\n", bpfErr)
	} else if b.RunCount > 0 || b.OffCPU.Switches == 0 { // no sampling program ran with --off-cpu alone
		// Runs cost time also when the filters end them; a sample
		// bears the cost of all runs.
		perRun, perSample := "no", "no"
		if b.RunCount > 0 {
			perRun = fmt.Sprintf("%.0f", float64(b.RunTimeNs)/float64(b.RunCount))
		}
		if b.Sent > 0 {
			perSample = fmt.Sprintf("%.0f", float64(b.RunTimeNs)/float64(b.Sent))
		}
		fmt.Fprintf(e.stderr, "sprof: BPF program: %d runs, %s ns/run, %s ns/sample; %d KiB ring, %d records spilled to the backlog\n",
			b.RunCount, perRun, perSample, b.RingSize>>10, b.Spilled)
	}
	if off := b.OffCPU; bpfErr == nil && off.Switches > 0 {
		fmt.Fprintf(e.stderr, "sprof: off-CPU programs: %d context switches, %.0f ns/switch (%d system call exits included); %d records sent, %d waits below --off-cpu-min, %d lost\n",
			off.Switches, float64(off.RunTimeNs)/float64(off.Switches), off.SyscallExits, off.Sent, off.Short, off.Lost)
		if off.ExitHookPauses > 0 {
			fmt.Fprintf(e.stderr, "sprof: off-CPU: system calls were too many for the sys_exit hook's budget %d times; %d waits in system calls recorded meanwhile with their user pc alone\n",
				off.ExitHookPauses, off.Cut)
		}
		if off.ExitHookSilent > 0 {
			fmt.Fprintf(e.stderr, "sprof: off-CPU: the kernel took the sys_exit hook %d times without calling it; attached again\n", off.ExitHookSilent)
		}
	}
	fmt.Fprintf(e.stderr, "sprof: userspace: %.0f ns/sample (%v CPU draining %d samples into %d stacks); profile built in %v; %d side-band records lost\n",
		s.NsPerSample, s.Busy.Round(time.Microsecond), s.Samples, s.Stacks, s.Build.Round(time.Millisecond), s.SidebandLost)
	if py := s.Python; py.Processes > 0 || py.Err != nil {
		fmt.Fprintf(e.stderr, "sprof: Python: %s; %d samples with Python frames (%d cut short, %d frames unnamed); %d samples in the interpreter marked truncated, their Python frames not read (taken before sprof marked the process, or it could not, or the thread was not found)\n",
			count(py.Processes, "process", "processes"), py.Samples, py.Truncated, py.Unnamed, py.Unread)
		if py.Err != nil {
			fmt.Fprintf(e.stderr, "sprof: Python frames missing: %v\n", py.Err)
		}
	}
}

// printKernelUnwind says, with --unwind bpf or auto, how the walks over
// unwind tables in the kernel ended and how the tables' memory fared.
func printKernelUnwind(e *env, us collector.UnwindStats) {
	if t := us.KernelText(); t != "" {
		fmt.Fprintf(e.stderr, "sprof: %s\n", t)
	}
}

// cgroupIDOf returns the id of a cgroup v2 directory — its inode number,
// which is what bpf_get_current_cgroup_id reports. A relative path is taken
// below /sys/fs/cgroup.
func cgroupIDOf(path string) (uint64, error) {
	if !filepath.IsAbs(path) {
		path = filepath.Join("/sys/fs/cgroup", path)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil {
		return 0, fmt.Errorf("%s: %w (give a cgroup v2 directory, e.g. /sys/fs/cgroup/system.slice/foo.service)", path, err)
	}
	if fs.Type != unix.CGROUP2_SUPER_MAGIC {
		return 0, fmt.Errorf("%s is not in a cgroup v2 hierarchy (is cgroup v2 mounted at /sys/fs/cgroup?)", path)
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return 0, fmt.Errorf("%s is not a cgroup directory", path)
	}
	return st.Ino, nil
}
