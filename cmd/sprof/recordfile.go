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
	"github.com/sprof/sprof/internal/outfile"
	"github.com/sprof/sprof/symbolize/buildid"
	"github.com/sprof/sprof/symbolize/cpython"
	"github.com/sprof/sprof/symbolize/jit"
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
	case path == outfile.Stdout:
		return "", fmt.Errorf("--output - writes to standard output, whose format no name tells: give --format (%s)", all)
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

// recordingFile is a collector.Sink that writes a recording. It is
// published at its path once sampling runs and written there, not renamed
// into place at the end: a recording is readable up to its last complete
// chunk, at most a second old, whatever stops sprof. The first write error
// (a full disk) calls failed, which ends the recording then.
type recordingFile struct {
	out    *outfile.File
	w      *recording.Writer
	images []cbf.Image
	failed func(error)
}

func newRecording(out *outfile.File, frequency int) (*recordingFile, error) {
	var uts unix.Utsname
	unix.Uname(&uts)
	host, _ := os.Hostname()
	w, err := recording.NewWriter(out, recording.Options{Host: host, Kernel: unix.ByteSliceToString(uts.Release[:]),
		Arch: unix.ByteSliceToString(uts.Machine[:]), Frequency: uint64(frequency)})
	if err == nil {
		var m *cbf.ImageMap
		if m, err = cbf.NewImageMap("", cbf.Word64, []cbf.Image{kernelImage()}); err == nil {
			err = w.Kernel(m)
		}
	}
	if err != nil {
		return nil, outputError(out, err)
	}
	return &recordingFile{out: out, w: w, failed: func(error) {}}, nil
}

// outputError prefers the output's own error, which names the user's path
// and the cause, to what the recording writer made of it.
func outputError(out *outfile.File, err error) error {
	if werr := out.Err(); werr != nil {
		return werr
	}
	return err
}

// check passes a write error on to failed.
func (r *recordingFile) check(err error) error {
	if err != nil && r.out.Err() != nil {
		r.failed(r.out.Err())
	}
	return err
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
	return r.check(r.w.ProcessInContainer(t, pid, comm, container, im))
}

func (r *recordingFile) Exit(t time.Time, pid uint32) error { return r.check(r.w.Exit(t, pid)) }

func (r *recordingFile) Sample(t time.Time, pid, tid, cpu uint32, comm string, user, kernel []uint64, userTruncated bool) error {
	var flags recording.Flags
	if userTruncated {
		flags = recording.UserTruncated
	}
	return r.check(r.w.Sample(t, pid, tid, cpu, comm, user, kernel, flags, 1))
}

// JIT stores a JIT symbol that samples use (collector.JITSink).
func (r *recordingFile) JIT(t time.Time, pid uint32, s *jit.Symbol) error {
	sym := recording.JITSymbol{Start: s.Start, Size: s.Size, Name: s.Name}
	for _, l := range s.Lines {
		sym.Lines = append(sym.Lines, recording.JITLine{Offset: l.Offset, File: l.File, Line: l.Line})
	}
	return r.check(r.w.JIT(t, pid, sym))
}

// Python stores the name of a Python frame that samples use
// (collector.PythonSink).
func (r *recordingFile) Python(t time.Time, pid uint32, addr uint64, f cpython.Frame) error {
	return r.check(r.w.Python(t, pid, recording.PythonFrame{Addr: addr, Function: f.Function, File: f.File, Line: f.Line}))
}

func (r *recordingFile) OffCPU(t time.Time, pid, tid, cpu uint32, comm string, user, kernel []uint64, userTruncated bool, ns uint64) error {
	var flags recording.Flags
	if userTruncated {
		flags = recording.UserTruncated
	}
	return r.check(r.w.OffCPU(t, pid, tid, cpu, comm, user, kernel, flags, ns))
}

func (r *recordingFile) Tick() error { return r.check(r.w.Tick()) }

// close ends the recording with the count of samples the sampler lost.
func (r *recordingFile) close(lost uint64) error {
	r.w.Lost(lost)
	err := r.w.Close()
	if err == nil {
		err = r.out.Commit()
	}
	if err != nil {
		return outputError(r.out, err)
	}
	return nil
}

// abort writes out what close did not, after an error: a published
// recording keeps what was written, as after a crash.
func (r *recordingFile) abort() { r.w.Flush() }
