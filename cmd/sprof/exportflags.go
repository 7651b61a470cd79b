package main

import (
	"strings"

	"github.com/spf13/pflag"

	"github.com/sprof/sprof/exporters"
)

// processRootHelp lists the values of --process-root, which record, report
// and agent take.
const processRootHelp = "root frame naming each sample's process: none, comm, comm-pid, container-comm (the container's short ID above the comm)"

// exportFlags are --labels and --process-root, which the commands that
// write a profile file take.
type exportFlags struct {
	labels, processRoot string
}

// processRootAuto is --process-root's default: a root frame where a graph
// mixes programs, none where it shows one program (see rootFor).
const processRootAuto = "auto"

// add defines the flags on fs; autoHelp says what --process-root auto
// means for the command.
func (f *exportFlags) add(fs *pflag.FlagSet, autoHelp string) {
	var names []string
	for _, l := range exporters.DefaultLabels() {
		names = append(names, string(l))
	}
	fs.StringVar(&f.labels, "labels", strings.Join(names, ","), "pprof sample labels, comma-separated, of comm, pid, tid, container_id (none for none); pid and tid are numbers (-tagfocus pid=1234), a sample has container_id only if its process runs in a container")
	fs.StringVar(&f.processRoot, "process-root", processRootAuto, processRootHelp+"; auto: "+autoHelp)
}

// options checks the flags' values and returns the encoders' options they
// select; --process-root auto gives NoProcessRoot, which rootFor revises.
func (f *exportFlags) options() (exporters.Options, error) {
	labels, err := exporters.ParseLabels(f.labels)
	if err != nil {
		return exporters.Options{}, usagef("--labels: %v", err)
	}
	root := exporters.NoProcessRoot
	if f.processRoot != processRootAuto {
		if root, err = exporters.ParseProcessRoot(f.processRoot); err != nil {
			return exporters.Options{}, usagef("--process-root: %v", err)
		}
	}
	return exporters.Options{Labels: labels, ProcessRoot: root}, nil
}

// rootFor returns the process root of format for a profile of many
// programs (mixed) or of one: what --process-root says, or for auto the
// command name first in folded and SVG output of many programs, as bcc's
// profile -f and stackcollapse-perf.pl have it, so unrelated programs'
// _start roots do not merge into one tower. pprof output has -tagroot
// comm for that; speedscope output has a profile per process.
func (f *exportFlags) rootFor(format exporters.Format, mixed bool, chosen exporters.ProcessRoot) exporters.ProcessRoot {
	if f.processRoot == processRootAuto && mixed && (format == exporters.Folded || format == exporters.SVG) {
		return exporters.CommRoot
	}
	return chosen
}
