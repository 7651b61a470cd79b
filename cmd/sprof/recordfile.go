package main

import (
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sprof/sprof/cbf"
	"github.com/sprof/sprof/cbf/recording"
	"github.com/sprof/sprof/collector"
	"github.com/sprof/sprof/exporters"
	"github.com/sprof/sprof/symbolize/buildid"
)

// formatRecording is `sprof record`'s own output format: the samples as
// taken, with the image maps of their processes (cbf/FORMAT.md), to be
// symbolized later by `sprof report`.
const formatRecording exporters.Format = "sprof"

// outputFormat picks the output format from --format, or else from the
// output file's name. Its errors list every format record writes, the
// .sprof recording included.
func outputFormat(path, format string) (exporters.Format, error) {
	all := formatNames(append(exporters.Formats(), formatRecording))
	switch {
	case strings.EqualFold(format, string(formatRecording)):
		return formatRecording, nil
	case format != "":
		f, err := exporters.ParseFormat(format)
		if err != nil {
			return "", fmt.Errorf("--format: unknown format %q; formats are: %s", format, all)
		}
		return f, nil
	case strings.HasSuffix(strings.ToLower(path), ".sprof"):
		return formatRecording, nil
	}
	f, err := exporters.FormatFromPath(path)
	if err != nil {
		return "", fmt.Errorf("--output %s: cannot tell the format from the name; end it in %s or .sprof, or give --format (%s)",
			path, exporters.Extensions(), all)
	}
	return f, nil
}

// kernelImage stands for the kernel and its modules in a recording: the
// upper half of the address space. `sprof report` names kernel frames from
// kallsyms when the recording's kernel release is the running one. The
// running kernel's build ID (/sys/kernel/notes, as perf reads it) names
// its vmlinux for symbolizers elsewhere; none when unreadable.
func kernelImage() cbf.Image {
	im := cbf.Image{Path: "[kernel.kallsyms]", Base: 0xffff800000000000, EndOfText: 0xffffffffffffffff}
	if id, err := buildid.Kernel(); err == nil {
		im.BuildID, _ = hex.DecodeString(id)
	}
	return im
}

// recordingFile is a collector.Sink that writes a recording. The file is
// written in place, not renamed into place at the end: a recording is
// readable up to its last complete chunk, at most a second old, whatever
// stops sprof.
type recordingFile struct {
	f       *os.File
	w       *recording.Writer
	images  []cbf.Image
	sampled bool
}

func createRecording(path string, frequency int) (*recordingFile, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("create output: %w", err)
	}
	var uts unix.Utsname
	unix.Uname(&uts)
	host, _ := os.Hostname()
	w, err := recording.NewWriter(f, recording.Options{Host: host, Kernel: unix.ByteSliceToString(uts.Release[:]),
		Arch: unix.ByteSliceToString(uts.Machine[:]), Frequency: uint64(frequency)})
	if err == nil {
		var m *cbf.ImageMap
		if m, err = cbf.NewImageMap("", cbf.Word64, []cbf.Image{kernelImage()}); err == nil {
			err = w.Kernel(m)
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return &recordingFile{f: f, w: w}, nil
}

func (r *recordingFile) Process(t time.Time, pid uint32, comm, container string, maps []collector.Mapping) error {
	r.images = r.images[:0]
	for _, m := range maps {
		id, _ := hex.DecodeString(m.BuildID)
		r.images = append(r.images, cbf.Image{Path: m.Path, BuildID: id, Base: m.Start, EndOfText: m.Limit, TextOffset: m.Offset})
	}
	im, err := cbf.NewImageMap("", cbf.Word64, r.images)
	if err != nil {
		return fmt.Errorf("mappings of pid %d: %w", pid, err)
	}
	return r.w.ProcessInContainer(t, pid, comm, container, im)
}

func (r *recordingFile) Exit(t time.Time, pid uint32) error { return r.w.Exit(t, pid) }

func (r *recordingFile) Sample(t time.Time, pid, tid, cpu uint32, comm string, user, kernel []uint64, userTruncated bool) error {
	r.sampled = true
	var flags recording.Flags
	if userTruncated {
		flags = recording.UserTruncated
	}
	return r.w.Sample(t, pid, tid, cpu, comm, user, kernel, flags, 1)
}

func (r *recordingFile) Tick() error { return r.w.Tick() }

// close ends the recording with the count of samples the sampler lost.
func (r *recordingFile) close(lost uint64) error {
	r.w.Lost(lost)
	err := r.w.Close()
	if cerr := r.f.Close(); err == nil {
		err = cerr
	}
	r.f = nil
	if err != nil {
		return fmt.Errorf("write recording: %w", err)
	}
	return nil
}

// abort ends a recording that close did not, after an error: what was
// written stays, as after a crash, unless sampling never began.
func (r *recordingFile) abort() {
	if r == nil || r.f == nil {
		return
	}
	r.w.Flush()
	r.f.Close()
	if !r.sampled {
		os.Remove(r.f.Name())
	}
}
