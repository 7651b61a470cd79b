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

// add defines the flags on fs.
func (f *exportFlags) add(fs *pflag.FlagSet) {
	var names []string
	for _, l := range exporters.DefaultLabels() {
		names = append(names, string(l))
	}
	fs.StringVar(&f.labels, "labels", strings.Join(names, ","), "pprof sample labels, comma-separated, of comm, pid, tid, container_id (none for none); a sample has container_id only if its process runs in a container")
	fs.StringVar(&f.processRoot, "process-root", "none", processRootHelp)
}

// options checks the flags' values and returns the encoders' options they
// select.
func (f *exportFlags) options() (exporters.Options, error) {
	labels, err := exporters.ParseLabels(f.labels)
	if err != nil {
		return exporters.Options{}, usagef("--labels: %v", err)
	}
	root, err := exporters.ParseProcessRoot(f.processRoot)
	if err != nil {
		return exporters.Options{}, usagef("--process-root: %v", err)
	}
	return exporters.Options{Labels: labels, ProcessRoot: root}, nil
}
