package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sprof/sprof/cbf/recording"
	"github.com/sprof/sprof/exporters"
	"github.com/sprof/sprof/internal/outfile"
	"github.com/sprof/sprof/report"
	"github.com/sprof/sprof/stacks"
	"github.com/sprof/sprof/stacks/locations"
	"github.com/sprof/sprof/symbolize"
)

const reportUsage = `Usage: sprof report [flags] REC.sprof

Symbolizes a recording made by 'sprof record -o REC.sprof' and writes it as
a profile: record now on a busy host, symbolize later, here or on another
host that has the same binaries. Each binary is found by the path it had
when recorded and used only if its build ID is the recorded one; kernel
frames are named when this host runs the kernel release that was recorded.
Symbols, inline frames and source lines come from the binaries' debug info
through the same GSYM cache as 'sprof record' (--symbolizer, --cache-dir).
A recording cut short (sprof killed, disk full) is reported up to the cut.

Examples:
  sprof report cpu.sprof -o cpu.pb.gz                 # everything
  sprof report cpu.sprof --comm nginx -o nginx.svg     # one program's threads
  sprof report cpu.sprof -p 1234 --from 10s --to 40s -o app.folded
  sprof report cpu.sprof --from 2026-11-22T11:30:00Z -o later.speedscope.json
  sprof report cpu.sprof --process-root container-comm -o host.svg  # by container

The output format follows the file's extension unless --format says
otherwise: .pb.gz, .pprof, .pb (pprof); .folded, .txt (folded stacks);
.svg (flame graph); .speedscope.json (speedscope).
`

// reportOptions is the parsed command line of `sprof report`.
type reportOptions struct {
	input, output string
	format        exporters.Format
	pids          []uint32
	comms         []string
	from, to      string
	symbolizer    symbolizerFlags
	export        exporters.Options
	exportFlags   *exportFlags
}

func parseReport(e *env, args []string) (*reportOptions, error) {
	o := &reportOptions{}
	fs := newFlagSet(e, "report", reportUsage)
	fs.StringVarP(&o.output, "output", "o", "sprof.pb.gz", "output file, - for standard output; its extension picks the format")
	format := fs.String("format", "", "output format, overriding the extension: "+formatNames(exporters.Formats()))
	pids := fs.StringP("pid", "p", "", "only these processes: comma-separated pids")
	fs.StringSliceVar(&o.comms, "comm", nil, "only threads or processes of this name (repeat, or separate with commas)")
	fs.StringVar(&o.from, "from", "", "start of the window: an offset from the recording's start (10, 1m30s) or a time (RFC 3339)")
	fs.StringVar(&o.to, "to", "", "end of the window, as --from; default the end of the recording")
	export := &exportFlags{}
	export.add(fs, "comm in folded and SVG output of more than one process, else none")
	o.exportFlags = export
	o.symbolizer.add(fs)
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if fs.NArg() != 1 {
		return nil, usagef("want one REC.sprof, got %d arguments", fs.NArg())
	}
	var err error
	if o.export, err = export.options(); err != nil {
		return nil, err
	}
	o.input = fs.Arg(0)
	if err := o.symbolizer.check(); err != nil {
		return nil, err
	}
	if *format != "" {
		o.format, err = exporters.ParseFormat(*format)
	} else {
		o.format, err = exporters.FormatFromPath(o.output)
	}
	if err != nil {
		return nil, &usageError{err.Error()}
	}
	if *pids != "" {
		for _, f := range strings.Split(*pids, ",") {
			pid, err := strconv.ParseUint(strings.TrimSpace(f), 10, 32)
			if err != nil {
				return nil, usagef("--pid: %q is not a process id (expected a comma-separated list like 1234,5678)", f)
			}
			o.pids = append(o.pids, uint32(pid))
		}
	}
	return o, nil
}

func runReport(e *env, args []string) error {
	o, err := parseReport(e, args)
	if err != nil {
		return err
	}
	f, err := os.Open(o.input)
	if err != nil {
		return err
	}
	defer f.Close()
	rd, err := recording.NewReader(f)
	if err != nil {
		return err
	}
	h := rd.Header()
	opts := report.Options{Pids: o.pids, Comms: o.comms, Symbolizer: o.symbolizer.newSymbolizer(e, "report")}
	if opts.From, err = windowEdge(o.from, h.Start); err != nil {
		return usagef("--from: %v", err)
	}
	if opts.To, err = windowEdge(o.to, h.Start); err != nil {
		return usagef("--to: %v", err)
	}
	if opts.To != 0 && opts.To <= opts.From {
		return usagef("--to %s is not after --from %s", o.to, o.from)
	}
	opts.Kernel = kernelFor(e, h.Kernel)
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if st, err := f.Stat(); err == nil && st.Size() > 0 {
		bar := newProgressBar(e.stderr, "bytes read")
		opts.Progress = func(read int64) { bar.update(read, st.Size()) }
		defer bar.done()
	}
	prof, res, err := report.Read(f, opts)
	if err != nil {
		return fmt.Errorf("%s: %w", o.input, err)
	}
	if d := damageText(res); d != "" {
		fmt.Fprintf(e.stderr, "sprof report: %s: %s\n", o.input, d)
	}
	if res.Kept == 0 {
		// An empty profile is no answer: say why, and write nothing.
		return fmt.Errorf("%s: no samples to report: %s; wrote nothing", o.input, whyEmpty(o, res))
	}
	o.export.ProcessRoot = o.exportFlags.rootFor(o.format, manyProcesses(prof), o.export.ProcessRoot)
	o.export.Subject = reportSubject(h.Host, o)
	out, err := outfile.Create(o.output, e.stdout)
	if err != nil {
		return err
	}
	defer out.Abort()
	if err := exporters.Write(out, prof, o.format, o.export); err != nil {
		return err
	}
	if err := out.Commit(); err != nil {
		return err
	}
	if len(res.Missing) > 0 {
		fmt.Fprintf(e.stderr, "sprof report: frames of these binaries stay unnamed, not found or rebuilt since: %s\n", strings.Join(res.Missing, ", "))
	}
	fmt.Fprintf(e.stderr, "sprof report: %d of %d samples; wrote %s (%s)\n", res.Kept, res.Samples, out.Name(), o.format)
	return nil
}

// damageText says what damage cost a report, "" when there was none. A
// recording that ends in damage and has no End chunk was cut: its writer
// was killed or its disk filled.
func damageText(res *report.Result) string {
	if res.Damaged == 0 && res.Unplaced == 0 {
		return ""
	}
	var offs []string
	for _, d := range res.Damage {
		offs = append(offs, strconv.FormatInt(d.Offset, 10))
	}
	if res.Damaged > len(res.Damage) {
		offs = append(offs, fmt.Sprintf("and %d more", res.Damaged-len(res.Damage)))
	}
	at := "at offsets " + strings.Join(offs, ", ")
	if res.Damaged == 1 {
		at = "at offset " + offs[0]
	}
	if res.Written >= res.Samples && res.Written > 0 {
		lost := res.Written - res.Samples + res.Unplaced
		return fmt.Sprintf("%d of %d samples lost to damage %s (%s)", lost, res.Written, at, res.Damage[0].Reason)
	}
	if res.Damaged == 1 && res.Unplaced == 0 {
		return fmt.Sprintf("cut short %s (%s); reported what comes before", at, res.Damage[0].Reason)
	}
	return fmt.Sprintf("damaged %s (%s); the samples there are lost, and %d more that refer to them", at, res.Damage[0].Reason, res.Unplaced)
}

// whyEmpty says why no sample made it into a report.
func whyEmpty(o *reportOptions, res *report.Result) string {
	switch {
	case res.Samples == 0 && res.Damaged > 0:
		return "no intact samples"
	case res.Samples == 0:
		return "the recording holds no samples"
	case res.Samples == res.Unplaced:
		return "every sample refers to stacks or processes lost to damage"
	}
	var filters []string
	if len(o.pids) > 0 {
		pids := make([]string, len(o.pids))
		for i, p := range o.pids {
			pids[i] = strconv.FormatUint(uint64(p), 10)
		}
		filters = append(filters, "--pid "+strings.Join(pids, ","))
	}
	if len(o.comms) > 0 {
		filters = append(filters, "--comm "+strings.Join(o.comms, ","))
	}
	if o.from != "" {
		filters = append(filters, "--from "+o.from)
	}
	if o.to != "" {
		filters = append(filters, "--to "+o.to)
	}
	return fmt.Sprintf("none of its %d samples, taken from the start to %v, matches %s", res.Samples, res.Last.Round(time.Millisecond), strings.Join(filters, " "))
}

// windowEdge parses --from or --to: an offset from the recording's start
// (plain seconds or a Go duration), or a time in RFC 3339.
func windowEdge(s string, start time.Time) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	var d durationValue
	if err := d.Set(s); err == nil {
		return time.Duration(d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, fmt.Errorf("%q is neither an offset (10, 1m30s) nor a time (2006-01-02T15:04:05Z)", s)
	}
	if t.Before(start) {
		return 0, fmt.Errorf("%s is before the recording started (%s)", s, start.UTC().Format(time.RFC3339))
	}
	return t.Sub(start), nil
}

// kernelFor returns the kernel symbolizer for a recording made on kernel
// release recorded: this host's kallsyms, if it runs that release.
func kernelFor(e *env, recorded string) locations.KernelSymbolizer {
	var uts unix.Utsname
	unix.Uname(&uts)
	if running := unix.ByteSliceToString(uts.Release[:]); running != recorded {
		fmt.Fprintf(e.stderr, "sprof report: kernel frames stay unnamed: recorded on kernel %s, this host runs %s\n", recorded, running)
		return nil
	}
	k, err := symbolize.LoadKernel()
	if err != nil {
		fmt.Fprintf(e.stderr, "sprof report: kernel frames stay unnamed: %v\n", err)
		return nil
	}
	return k
}

// manyProcesses reports whether prof holds samples of more than one
// process.
func manyProcesses(prof *stacks.Profile) bool {
	for _, s := range prof.Samples {
		if s.Pid != prof.Samples[0].Pid {
			return true
		}
	}
	return false
}

// reportSubject names what a report shows, for the flame graph's title:
// the recorded host, narrowed by --pid and --comm.
func reportSubject(host string, o *reportOptions) string {
	var what []string
	for _, p := range o.pids {
		what = append(what, "pid "+strconv.FormatUint(uint64(p), 10))
	}
	what = append(what, o.comms...)
	if len(what) == 0 {
		return host
	}
	return strings.Join(what, ", ") + " on " + host
}
