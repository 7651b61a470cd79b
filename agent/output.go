package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sprof/sprof/exporters"
	"github.com/sprof/sprof/exporters/pyroscope"
)

// stampLayout begins every file name: the interval's start in UTC, to the
// millisecond, so names sort by time and an interval's files share it.
const stampLayout = "20060102T150405.000Z"

// fileSuffix ends every file name; the format is pprof, gzip-compressed.
const fileSuffix = ".pb.gz"

// shortContainer is how much of a container ID a file name holds: the 12
// digits `docker ps` shows. The profile inside has the whole ID as
// container_id label.
const shortContainer = 12

// outputDir writes each interval's profiles as pprof files named
// STAMP_SERVICE.pb.gz, or STAMP_SERVICE_CONTAINER.pb.gz with the short
// container ID for a container's series, and keeps the newest keep
// intervals.
type outputDir struct {
	dir  string
	keep int
	opts exporters.Options
	pw   exporters.PprofWriter
}

// open creates the directory if it is missing: at start, and again on
// SIGHUP, after an operator moved it away.
func (o *outputDir) open() error {
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return fmt.Errorf("output directory: %w", err)
	}
	return nil
}

// write writes one file per series and then removes the oldest intervals'
// files. It returns how many files it wrote and the errors it met.
func (o *outputDir) write(start time.Time, items []pyroscope.Series) (int, []error) {
	n, errs := o.writeIn(o.dir, start, items)
	if err := o.rotate(); err != nil {
		errs = append(errs, err)
	}
	return n, errs
}

// spillDir is where the intervals that could not be delivered to a
// destination go: unsent-DESTINATION inside the directory, apart from the
// rotated files, so that nothing removes them and they can be sent later
// (`sprof` leaves that to the operator).
func (o *outputDir) spillDir(to string) string {
	return filepath.Join(o.dir, "unsent-"+fileSafe(to))
}

// spill writes an interval that could not be delivered to spillDir(to),
// with the same names as write.
func (o *outputDir) spill(to string, start time.Time, items []pyroscope.Series) (int, []error) {
	dir := o.spillDir(to)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, []error{fmt.Errorf("spill directory: %w", err)}
	}
	return o.writeIn(dir, start, items)
}

// writeIn writes one file per series into dir.
func (o *outputDir) writeIn(dir string, start time.Time, items []pyroscope.Series) (int, []error) {
	stamp := start.UTC().Format(stampLayout)
	var errs []error
	n := 0
	for _, it := range items {
		name := stamp + "_" + fileSafe(it.Service)
		if it.Container != "" {
			name += "_" + fileSafe(it.Container[:min(len(it.Container), shortContainer)])
		}
		path := filepath.Join(dir, name+fileSuffix)
		if err := writeAtomic(path, func(f *os.File) error { return o.pw.Write(f, it.Profile, o.opts) }); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errs
}

// rotate removes the files of all but the newest keep intervals. Only
// names of the agent's own shape are touched.
func (o *outputDir) rotate() error {
	ents, err := os.ReadDir(o.dir)
	if err != nil {
		return fmt.Errorf("rotate: %w", err)
	}
	byStamp := map[string][]string{}
	var stamps []string
	for _, e := range ents {
		stamp, ok := stampOf(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		if byStamp[stamp] == nil {
			stamps = append(stamps, stamp)
		}
		byStamp[stamp] = append(byStamp[stamp], e.Name())
	}
	if len(stamps) <= o.keep {
		return nil
	}
	slices.Sort(stamps) // the layout sorts by time
	var errs []string
	for _, s := range stamps[:len(stamps)-o.keep] {
		for _, name := range byStamp[s] {
			if err := os.Remove(filepath.Join(o.dir, name)); err != nil && !os.IsNotExist(err) {
				errs = append(errs, err.Error())
			}
		}
	}
	if errs != nil {
		return fmt.Errorf("rotate: %s", strings.Join(errs, "; "))
	}
	return nil
}

// stampOf returns the interval stamp of a file the agent wrote.
func stampOf(name string) (string, bool) {
	stamp, rest, ok := strings.Cut(name, "_")
	if !ok || !strings.HasSuffix(rest, fileSuffix) {
		return "", false
	}
	if _, err := time.Parse(stampLayout, stamp); err != nil {
		return "", false
	}
	return stamp, true
}

// fileSafe makes a service name usable in a file name: letters, digits,
// '.', '-' and '_' are kept, anything else becomes '_'.
func fileSafe(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
		case c == '.' && i > 0:
		default:
			b[i] = '_'
		}
	}
	return string(b)
}

// writeAtomic writes path under a temporary name and renames it into
// place, so a reader never sees half a profile and a crash leaves no
// broken file behind.
func writeAtomic(path string, write func(*os.File) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	err = write(f)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
