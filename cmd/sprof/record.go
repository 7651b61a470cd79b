package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sprof/sprof/collector"
	"github.com/sprof/sprof/exporters"
)

const recordUsage = `Usage: sprof record [flags] [-- COMMAND [ARGS...]]

Samples the CPU stacks (user and kernel) of every process on every CPU, of
the processes given with -p, of a cgroup, or of one command and its children,
and writes a profile when the duration is over, the command or all the -p
processes exit, or on Ctrl-C (or SIGTERM), which a command after -- is sent
too; after -d, the command runs on to its end. One summary line goes to stderr: duration,
samples, lost samples, processes and the output file.

Examples:
  sudo sprof record -F 99 -d 10s -o cpu.pb.gz        # whole host for 10 s
  go tool pprof -http :8080 cpu.pb.gz                 # then look at it
  sudo sprof record -o app.folded -- ./myapp --flag   # one command until it exits
  sudo sprof record -p 1234,5678 -d 30 -o cpu.pb.gz   # two processes for 30 s
  sudo sprof record --cgroup /sys/fs/cgroup/system.slice/nginx.service -o nginx.pb.gz
  sudo sprof record -U -F 49 -d 1m -o user.folded      # user stacks only, 49 Hz
  sudo sprof record -d 30 --process-root container-comm -o host.svg  # by container
  sudo sprof record --off-cpu -p 1234 -d 30 -o waits.svg  # where pid 1234 waits
  sudo sprof record --off-cpu --cpu -d 30 -o both.pb.gz   # pprof -sample_index=off_cpu

The output format follows the file's extension unless --format says
otherwise: .pb.gz, .pprof, .pb (pprof, for go tool pprof and Pyroscope);
.folded, .txt (folded stacks); .svg (interactive flame graph);
.speedscope.json (speedscope); .sprof (a recording of the raw samples and
the processes' image maps, readable even if sprof is killed; 'sprof report'
symbolizes it later, into any of the other formats).

Off-CPU profiling (--off-cpu) records where threads wait instead of where
they run: each time a thread of the selected processes runs again after at
least --off-cpu-min off the CPU (blocked on a lock, in I/O, asleep,
preempted), its stacks as it left the CPU, kernel frames included, count the
time it waited. pprof output gets an off_cpu/nanoseconds sample type, alone
or with --cpu beside the CPU samples (go tool pprof -sample_index=off_cpu
selects it); OTLP output an off_cpu/nanoseconds profile per service, beside
its CPU profile with --cpu; folded and SVG count microseconds off the CPU
and speedscope nanoseconds, so they take --off-cpu without --cpu. The user
stack of a wait in a system call is read as the call returns, by a hook on
every system call's exit; while the busiest CPU makes more than
--off-cpu-syscall-budget (40,000) system calls a second that hook is off,
and such waits show only the function that made the call, marked
[truncated] (--stats counts them).
`

// recordOptions is the parsed command line of `sprof record`.
type recordOptions struct {
	frequency   int
	duration    time.Duration
	pids        []uint32
	cgroup      string
	output      string
	format      exporters.Format
	includeIdle bool
	stats       bool
	cpu         bool // sample the CPU (by default unless --off-cpu)
	sampling    samplingFlags
	symbolizer  symbolizerFlags
	export      exporters.Options
	command     []string
}

// defaultFrequency is record's -F: a prime, so sampling does not lock step
// with work on a round period, and low enough to cost under 1% of a CPU.
const defaultFrequency = 99

// userModeFrame is the frame of a sample without a kernel stack under -K:
// one taken while the CPU ran user code.
const userModeFrame = "[user]"

// parseRecord parses and checks the command line of `sprof record`.
func parseRecord(e *env, args []string) (*recordOptions, error) {
	o := &recordOptions{}
	fs := newFlagSet(e, "record", recordUsage)
	o.frequency = defaultFrequency
	fs.VarP((*frequencyValue)(&o.frequency), "frequency", "F", "samples per second on each CPU (19 for always-on profiling, up to kernel.perf_event_max_sample_rate)")
	fs.VarP((*durationValue)(&o.duration), "duration", "d", "how long to record (10, 10s, 1m30s); 0 = until Ctrl-C or the command exits")
	pidList := fs.StringP("pid", "p", "", "only these processes: comma-separated pids (filtered in the kernel)")
	fs.StringVar(&o.cgroup, "cgroup", "", "only processes in this cgroup v2 directory (e.g. /sys/fs/cgroup/system.slice/foo.service)")
	fs.StringVarP(&o.output, "output", "o", "sprof.pb.gz", "output file, - for standard output; its extension picks the format")
	format := fs.String("format", "", "output format, overriding the extension: "+formatNames(append(exporters.Formats(), formatRecording)))
	fs.BoolVarP(&o.includeIdle, "include-idle", "I", false, "also sample idle CPUs (pid 0)")
	fs.BoolVar(&o.stats, "stats", false, "print the BPF program's ns per run and per sample, its ring size and backlog use, sprof's userspace ns per sample, how the walks over unwind tables ended, and how many samples had Python frames or lost them")
	o.sampling.add(fs, collector.DefaultUnwindCacheBytes, "record where threads wait off the CPU (blocked, asleep, preempted) instead of where they run; add --cpu for both")
	fs.BoolVar(&o.cpu, "cpu", true, "sample what runs on the CPU (the default; with --off-cpu, records both)")
	export := &exportFlags{}
	export.add(fs, "comm in folded and SVG output of every process or a --cgroup, none with -p or a command")
	o.symbolizer.add(fs)
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if dash := fs.ArgsLenAtDash(); dash >= 0 {
		if dash > 0 {
			return nil, usagef("unexpected argument %q before --; the command goes after --", fs.Args()[0])
		}
		o.command = fs.Args()
		if len(o.command) == 0 {
			return nil, usagef("no command after --")
		}
	} else if fs.NArg() > 0 {
		return nil, usagef("unexpected argument %q; put a command to profile after --, as in: sprof record -- %s", fs.Arg(0), strings.Join(fs.Args(), " "))
	}
	if err := checkFrequency(o.frequency); err != nil {
		return nil, err
	}
	if err := o.sampling.check(fs); err != nil {
		return nil, err
	}
	if o.sampling.offCPU && !fs.Changed("cpu") {
		o.cpu = false
	}
	if !o.cpu && !o.sampling.offCPU {
		return nil, usagef("--cpu=false records nothing; add --off-cpu")
	}
	if err := o.symbolizer.check(); err != nil {
		return nil, err
	}
	if *pidList != "" {
		pids, err := parsePids(e.stderr, *pidList)
		if err != nil {
			return nil, usagef("--pid: %v", err)
		}
		o.pids = pids
	}
	if len(o.pids) > 0 && len(o.command) > 0 {
		return nil, usagef("--pid and a command after -- exclude each other; give one")
	}
	if o.output == "" {
		return nil, usagef("--output must name a file")
	}
	var err error
	if o.format, err = outputFormat(o.output, *format); err != nil {
		return nil, &usageError{err.Error()}
	}
	if o.export, err = export.options(); err != nil {
		return nil, err
	}
	o.export.ProcessRoot = export.rootFor(o.format, len(o.pids) == 0 && len(o.command) == 0, o.export.ProcessRoot)
	o.export.Subject = recordSubject(o)
	if o.sampling.kernelOnly {
		o.export.EmptyStack = userModeFrame
	}
	if o.sampling.offCPU && o.cpu && !slices.Contains([]exporters.Format{exporters.Pprof, exporters.OTLP, exporters.OTLPJSON, formatRecording}, o.format) {
		return nil, usagef("%s output has one value per stack; --off-cpu --cpu needs pprof (.pb.gz), OTLP or a .sprof recording, or drop --cpu for off-CPU time alone", o.format)
	}
	o.export.OffCPU = o.sampling.offCPU && !o.cpu
	if o.format == formatRecording && (fs.Changed("labels") || fs.Changed("process-root")) {
		return nil, usagef("--labels and --process-root shape a profile; a .sprof recording keeps every sample's process and container, give them to 'sprof report'")
	}
	return o, nil
}

// recordSubject names what a recording profiles, for the flame graph's
// title: the command line, or the processes, cgroup or host.
func recordSubject(o *recordOptions) string {
	if len(o.command) > 0 {
		return strings.Join(o.command, " ")
	}
	host, err := os.Hostname()
	if err != nil {
		host = "this host"
	}
	switch {
	case len(o.pids) > 0:
		pids := make([]string, len(o.pids))
		for i, p := range o.pids {
			pids[i] = strconv.FormatUint(uint64(p), 10)
		}
		word := "pid"
		if len(pids) > 1 {
			word = "pids"
		}
		return fmt.Sprintf("%s %s on %s", word, strings.Join(pids, ","), host)
	case o.cgroup != "":
		return o.cgroup + " on " + host
	}
	return host
}

// parsePids parses "1234,5678" and checks that each process exists now, so a
// typo is reported at once instead of as an empty profile. The kernel
// filters samples by process, so a thread id (as top -H or a stack dump
// shows) stands for its process, which w is told in one line.
func parsePids(w io.Writer, list string) ([]uint32, error) {
	var pids []uint32
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		id, err := strconv.ParseUint(f, 10, 32)
		if err != nil || id == 0 {
			return nil, fmt.Errorf("%q is not a process id (expected a comma-separated list like 1234,5678)", f)
		}
		pid := uint32(id)
		if err := unix.Kill(int(pid), 0); err == unix.ESRCH {
			return nil, fmt.Errorf("no process with pid %d", pid)
		}
		if tgid, err := processOf(pid); err == nil && tgid != pid {
			fmt.Fprintf(w, "sprof: -p %d is a thread of process %d; profiling the process\n", pid, tgid)
			pid = tgid
		}
		if !slices.Contains(pids, pid) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// processOf returns the process (thread group) id of thread tid, from the
// Tgid line of /proc/TID/status.
func processOf(tid uint32) (uint32, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", tid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "Tgid:"); ok {
			id, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/status: Tgid %q: %w", tid, strings.TrimSpace(v), err)
			}
			return uint32(id), nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no Tgid line", tid)
}

func formatNames(formats []exporters.Format) string {
	var names []string
	for _, f := range formats {
		names = append(names, string(f))
	}
	return strings.Join(names, ", ")
}

// watchExits returns a channel closed once every process in pids has
// exited, so that `record -p` ends with its processes as perf record -p
// does, and a function that stops watching. A pidfd polls readable when
// its process exits, zombie or reaped, and never names a reused pid; a
// process already gone counts as exited.
func watchExits(pids []uint32) (<-chan struct{}, func(), error) {
	fds := make([]unix.PollFd, 0, len(pids))
	closeAll := func() {
		for _, p := range fds {
			unix.Close(int(p.Fd))
		}
	}
	for _, pid := range pids {
		fd, err := unix.PidfdOpen(int(pid), 0)
		if err == unix.ESRCH {
			continue
		}
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("watch pid %d for its exit: %w", pid, err)
		}
		fds = append(fds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
	}
	exited, stop := make(chan struct{}), make(chan struct{})
	go func() {
		defer closeAll()
		for len(fds) > 0 {
			select {
			case <-stop:
				return
			default:
			}
			// A bounded wait, so stop is seen within a quarter second.
			n, err := unix.Poll(fds, 250)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return // the recording then ends as without -p's exits
			}
			if n == 0 {
				continue
			}
			live := fds[:0]
			for _, p := range fds {
				if p.Revents != 0 {
					unix.Close(int(p.Fd))
				} else {
					live = append(live, p)
				}
			}
			fds = live
		}
		close(exited)
	}()
	var once sync.Once
	return exited, func() { once.Do(func() { close(stop) }) }, nil
}

// count says "1 sample" or "2 samples": n and the noun in its number.
// lossHint says what to do when 1% or more of the samples taken were lost
// (the programs found the ring and the backlog full: user space did not
// keep up), and nothing otherwise.
func lossHint(kept, lost uint64) string {
	taken := kept + lost
	if lost == 0 || lost*100 < taken {
		return ""
	}
	return fmt.Sprintf("%.1f%% of the samples taken were lost: they came faster than sprof could read them on this host; a lower --frequency keeps them (a larger --ring-buffer, only bursts)",
		float64(lost)*100/float64(taken))
}

func count[N int | uint64](n N, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
