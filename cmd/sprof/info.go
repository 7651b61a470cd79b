package main

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/sprof/sprof/cbf/recording"
)

const infoUsage = `Usage:
  sprof info FILE.sprof

Describes a recording: where and when it was made, how long it covers,
how many samples, processes and images it holds, and how many bytes each
sample took. A recording whose writer was killed or ran out of disk ends
in a damaged tail; info says where it starts. Everything before it is
intact and usable.
`

func runInfo(e *env, args []string) error {
	fs := newFlagSet(e, "info", infoUsage)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("want one FILE.sprof, got %d arguments", fs.NArg())
	}
	f, err := os.Open(fs.Arg(0))
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	s, err := recording.Summarize(f)
	if err != nil {
		return err
	}
	printSummary(e.stdout, fs.Arg(0), st.Size(), s)
	return nil
}

func printSummary(w io.Writer, name string, size int64, s *recording.Summary) {
	h := &s.Header
	fmt.Fprintf(w, "file          %s, %d bytes, format version %d\n", name, size, h.Version)
	fmt.Fprintf(w, "host          %s (%s, kernel %s)\n", h.Host, h.Arch, h.Kernel)
	fmt.Fprintf(w, "started       %s\n", h.Start.UTC().Format(time.RFC3339Nano))
	fmt.Fprintf(w, "duration      %v\n", s.Duration().Round(time.Millisecond))
	fmt.Fprintf(w, "frequency     %d Hz\n", h.Frequency)
	fmt.Fprintf(w, "samples       %d (%d lost)\n", s.Samples, s.Lost)
	if s.OffCPU > 0 {
		fmt.Fprintf(w, "off-CPU       %d waits, %v in all\n", s.OffCPU, s.OffCPUTime.Round(time.Millisecond))
	}
	fmt.Fprintf(w, "processes     %d\n", s.Processes)
	fmt.Fprintf(w, "images        %d\n", s.Images)
	fmt.Fprintf(w, "stacks        %d stored\n", s.Stacks)
	if s.Samples > 0 {
		fmt.Fprintf(w, "bytes/sample  %.1f\n", float64(size)/float64(s.Samples))
	}
	if size > 0 {
		fmt.Fprintf(w, "bytes         %s\n", byteShares(s.Bytes, size))
	}
	if s.Unknown > 0 {
		fmt.Fprintf(w, "skipped       %d chunks of types this sprof does not know\n", s.Unknown)
	}
	for _, d := range s.Damage {
		fmt.Fprintf(w, "damaged       offsets %d to %d (%d bytes skipped): %s\n", d.Offset, d.End, d.End-d.Offset, d.Reason)
	}
	if s.Damaged > len(s.Damage) {
		fmt.Fprintf(w, "damaged       and %d more stretches\n", s.Damaged-len(s.Damage))
	}
	if s.Unplaced > 0 {
		fmt.Fprintf(w, "unplaced      %d samples refer to stacks lost to damage\n", s.Unplaced)
	}
	switch {
	case s.End == nil && s.Damaged > 0:
		fmt.Fprintf(w, "end           none: cut short (the writer was killed, or its disk filled)\n")
	case s.End == nil:
		fmt.Fprintf(w, "end           none: the writer stopped without closing the file (its chunks are intact)\n")
	default:
		fmt.Fprintf(w, "end           closed cleanly\n")
	}
}

// byteShares says where a recording's bytes go, by chunk type, largest
// first: "stacks 61% (65835), samples 25% (27050), ...".
func byteShares(bytes map[recording.ChunkType]int64, size int64) string {
	types := slices.Collect(maps.Keys(bytes))
	slices.SortFunc(types, func(a, b recording.ChunkType) int { return cmp.Or(cmp.Compare(bytes[b], bytes[a]), cmp.Compare(a, b)) })
	var parts []string
	for _, t := range types {
		parts = append(parts, fmt.Sprintf("%v %.0f%% (%d)", t, 100*float64(bytes[t])/float64(size), bytes[t]))
	}
	return strings.Join(parts, ", ")
}
