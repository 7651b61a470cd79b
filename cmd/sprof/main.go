// Command sprof is a system-wide sampling CPU profiler for Linux built on
// eBPF. Run `sprof --help` for the commands.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// command is one `sprof NAME` subcommand. Each lives in a file of its own
// and is listed once, in commands.
type command struct {
	name    string
	summary string
	// run receives the arguments after the command name.
	run func(env *env, args []string) error
}

// env is what a command may touch of the outside world, so tests can run
// commands in-process with their own streams.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
}

func commands() []command {
	return []command{
		{"record", "sample CPU stacks of every process, some processes, or one command", runRecord},
		{"agent", "profile continuously: every interval, one profile per service to Pyroscope or files", runAgent},
		{"gsym", "convert binaries to GSYM, look up addresses, dump GSYM files", runGsym},
		{"cbf", "decode Compact Backtrace Format stacks (hex, base64, Swift JSON)", runCBF},
		{"info", "describe a .sprof recording: duration, samples, size, damage", runInfo},
		{"report", "symbolize a .sprof recording into pprof, folded, SVG or speedscope", runReport},
		{"sframe", "dump, look up or synthesize (from .eh_frame) SFrame unwind tables", runSFrame},
		{"check", "say what this host allows sprof and what it lacks, with fixes", runCheck},
		{"version", "print sprof's version and how it was built", runVersion},
	}
}

// usageError is a mistake in the command line: it is reported in one line,
// which names the flag, what it allows and where the help is, and sprof
// exits with status 2, as perf and the shell builtins do.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...)}
}

// exitStatus ends sprof with a status that says all, after what there was
// to say has been printed: `sprof record -- CMD` exits as CMD did.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func main() {
	if len(os.Args) > 1 && os.Args[1] == launcherArg {
		os.Exit(runLauncher(os.Args[2:]))
	}
	os.Exit(run(&env{os.Stdin, os.Stdout, os.Stderr}, os.Args[1:]))
}

// run executes the command line args and returns the exit status.
func run(e *env, args []string) int {
	if len(args) == 0 { // a usage error, as for perf and git: usage on stderr, exit 2
		printUsage(e.stderr)
		return 2
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		printUsage(e.stdout)
		return 0
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(e, args[1:])
		var ue *usageError
		var status exitStatus
		switch {
		case err == nil, errors.Is(err, pflag.ErrHelp):
			return 0
		case errors.As(err, &status):
			return int(status)
		case errors.As(err, &ue):
			fmt.Fprintf(e.stderr, "sprof %s: %s; see 'sprof %s --help'\n", c.name, ue.msg, c.name)
			return 2
		default:
			fmt.Fprintf(e.stderr, "sprof %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(e.stderr, "sprof: unknown command %q; commands are: %s\n", args[0], commandNames())
	return 2
}

func commandNames() string {
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	return strings.Join(names, ", ")
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, `sprof samples the CPU stacks of a Linux host with eBPF and writes profiles
that pprof, flame-graph tools and Grafana Pyroscope read.

Usage:
  sprof COMMAND [flags] [args]

Commands:
`)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
Examples:
  sudo sprof check                                  # what this host allows sprof, and the fixes
  sudo sprof record -F 99 -d 10s -o cpu.pb.gz      # every process on every CPU
  go tool pprof -http :8080 cpu.pb.gz
  sudo sprof record -o app.folded -- ./myapp --flag # one command and its children
  sudo sprof record -p 1234,5678 -d 30s -o cpu.pb.gz

Run 'sprof COMMAND --help' for a command's flags.
`)
}

// newFlagSet returns a flag set that reports errors to run (not to stderr
// with an exit), prints usage on --help, and stops at "--".
func newFlagSet(e *env, name, usage string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.SortFlags = false
	fs.Usage = func() {
		fmt.Fprint(e.stdout, usage)
		fmt.Fprintf(e.stdout, "\nFlags:\n%s", fs.FlagUsages())
	}
	return fs
}

// parseFlags parses args, turning pflag's errors into usage errors.
func parseFlags(fs *pflag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard) // errors are printed once, by run
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return err // pflag has printed the usage
		}
		return &usageError{plainParseError(err.Error())}
	}
	return nil
}

// plainParseError replaces the strconv error pflag quotes for a bool or int
// flag ("strconv.ParseBool: parsing \"maybe\": invalid syntax") with what
// the flag takes.
func plainParseError(msg string) string {
	for prefix, want := range map[string]string{
		"strconv.ParseBool: ": "want true or false",
		"strconv.ParseInt: ":  "want a whole number",
	} {
		if i := strings.Index(msg, prefix); i >= 0 {
			return msg[:i] + want
		}
	}
	return msg
}
