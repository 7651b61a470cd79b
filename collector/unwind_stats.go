package collector

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sprof/sprof/unwind"
)

// UnwindStats describe the userspace unwinding of a recording (all zero
// without Options.StackCopy).
type UnwindStats struct {
	// Copies counts the samples that carried a stack copy;
	// TruncatedCopies those whose copy was clipped, and DroppedCopies
	// those whose copy did not fit the drain's budget (they keep their
	// BPF walk).
	Copies, TruncatedCopies, DroppedCopies uint64
	// CopyBytes is the size of all the copies, what they add to the
	// sampler's ring.
	CopyBytes uint64
	// Userspace and BPF count which walk was kept for a sample with a
	// copy; of the BPF ones, Resumed counts those the copy's unwind
	// continued where the frame-pointer chain ended, and Unrooted those
	// marked truncated for ending at a frame whose table says it has a
	// caller (unwind_resume.go).
	Userspace, BPF    uint64
	Resumed, Unrooted uint64
	// Frames counts the frames each method produced (the leaf frame,
	// which comes from the registers, is not counted).
	Frames [unwind.NumMethods]uint64
	// Marked counts the processes marked for stack copies; MarkErrors
	// the marks the sampler refused, MarkErr the first of them.
	Marked     int
	MarkErrors int
	MarkErr    error
	// Tables is the number of unwind tables in the cache and TableBytes
	// their size; Evicted counts the tables dropped to stay within the
	// budget, TableErrors the binaries whose table could not be built.
	// BuildTime is the time spent building tables.
	Tables      int
	TableBytes  int64
	Evicted     int
	TableErrors int
	BuildTime   time.Duration
	// TablesStored counts the tables read from Options.UnwindStore
	// rather than built; StoreErrors the stored tables that were damaged
	// (and rebuilt) and those that could not be stored, StoreErr the
	// first of them.
	TablesStored int
	StoreErrors  int
	StoreErr     error
	// Held counts the samples held back because a table their unwind
	// needed was still being built; Released those unwound once it was
	// there, and FlushedFull, FlushedAge and FlushedEnd those unwound
	// without it because the hold-back queue was full, they had waited
	// the longest a recording or an agent holds a sample back (2 s), or
	// the recording ended (see the binaries' "table still being built"
	// stops). Building is the number of tables under
	// way.
	Held, Released                      uint64
	FlushedFull, FlushedAge, FlushedEnd uint64
	Building                            int
	// In-kernel unwinding (Options.KernelTables): KernelWhole and
	// KernelPartial count the samples the sampler walked over tables to
	// the outermost frame and short of it; KernelTables the tables
	// loaded into the kernel, KernelStored those of them loaded in the
	// kernel's form from the unwind store, KernelReloaded those loaded
	// again after the kernel evicted them for others; KernelErrors the
	// tables and mappings it
	// refused, KernelErr the first of them. Kernel is the sampler's own
	// account of its tables' memory and walks, nil without tables.
	KernelWhole, KernelPartial uint64
	KernelTables               int
	KernelStored               int
	KernelReloaded             int
	KernelErrors               int
	KernelErr                  error
	Kernel                     *KernelTableStats
	// Binaries breaks frames and stops down by binary, most frames
	// first.
	Binaries []BinaryUnwind
}

// BinaryUnwind is how the stacks through one binary were unwound.
type BinaryUnwind struct {
	Name, BuildID string
	// Table says what unwinds the binary's code: "sframe", "eh_frame",
	// "frame pointers", or why there is nothing.
	Table string
	// Frames counts the frames found with the binary's rules (the
	// frame's caller is found through the binary's code), by method.
	Frames [unwind.NumMethods]uint64
	// Stops counts, by reason, the unwinds that stopped at a frame of
	// the binary.
	Stops map[string]uint64
}

// UnwindStats returns the userspace unwinding's statistics so far.
func (c *Collector) UnwindStats() UnwindStats {
	if c.unw == nil {
		return UnwindStats{}
	}
	return c.unw.report()
}

func (u *unwinder) report() UnwindStats {
	s := u.stats
	if u.kt != nil {
		if k, err := u.kt.loader.TableStats(); err == nil {
			s.Kernel = &k
		}
	}
	s.Binaries = nil
	for _, in := range append(u.infos(), &u.unknown) {
		if in.building {
			s.Building++
		}
		b := BinaryUnwind{Name: in.name, BuildID: in.buildID, Table: in.tableText(), Frames: in.frames}
		for r, n := range in.stops {
			if n > 0 {
				if b.Stops == nil {
					b.Stops = map[string]uint64{}
				}
				b.Stops[unwind.Stop(r).String()] += n
			}
		}
		if b.Stops != nil || b.total() > 0 {
			s.Binaries = append(s.Binaries, b)
		}
	}
	slices.SortFunc(s.Binaries, func(a, b BinaryUnwind) int {
		if c := cmp.Compare(b.total(), a.total()); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	return s
}

func (b *BinaryUnwind) total() uint64 {
	var n uint64
	for _, f := range b.Frames {
		n += f
	}
	return n
}

func (in *unwindInfo) tableText() string {
	switch {
	case in == nil || !in.classified:
		return "-"
	case in.framePointers:
		return "frame pointers"
	case in.err != nil:
		return "none: " + in.err.Error()
	case in.table != nil:
		return in.kind.String()
	case in.building:
		return "being built"
	case !in.built:
		return "not built"
	}
	return "none"
}

// WriteText prints the statistics as `sprof record --debug-unwind` shows
// them: totals, then one block per binary.
func (s *UnwindStats) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	avg := 0.0
	if s.Copies > 0 {
		avg = float64(s.CopyBytes) / float64(s.Copies)
	}
	fmt.Fprintf(tw, "samples with a stack copy: %d (%.0f bytes on average; %d truncated, %d dropped); kept: userspace %d, bpf-fp %d (%d resumed by the tables, %d ending at a frame with a caller)\n",
		s.Copies, avg, s.TruncatedCopies, s.DroppedCopies, s.Userspace, s.BPF, s.Resumed, s.Unrooted)
	fmt.Fprintf(tw, "processes marked for copies: %d (%d refused", s.Marked, s.MarkErrors)
	if s.MarkErr != nil {
		fmt.Fprintf(tw, ", first: %v", s.MarkErr)
	}
	fmt.Fprintf(tw, ")\nunwind tables: %d, %.1f MiB, %d evicted, %d failed, built or read in %v, %d read from the store (%d store errors",
		s.Tables, float64(s.TableBytes)/(1<<20), s.Evicted, s.TableErrors, s.BuildTime.Round(time.Millisecond), s.TablesStored, s.StoreErrors)
	if s.StoreErr != nil {
		fmt.Fprintf(tw, ", first: %v", s.StoreErr)
	}
	fmt.Fprintln(tw, ")")
	if s.Kernel != nil {
		fmt.Fprintln(tw, s.KernelText())
	}
	fmt.Fprintf(tw, "held back for tables being built: %d samples (%d unwound with the table; flushed without it: %d queue full, %d held too long, %d at the end); %d tables being built\n",
		s.Held, s.Released, s.FlushedFull, s.FlushedAge, s.FlushedEnd, s.Building)
	fmt.Fprintf(tw, "frames:")
	for m, n := range s.Frames {
		fmt.Fprintf(tw, " %s %d", unwind.Method(m), n)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "binary\ttable\tsframe\teh_frame\tframe pointer\tbpf-fp\tstops")
	for _, b := range s.Binaries {
		fmt.Fprintf(tw, "%s\t%s", b.Name, b.Table)
		for _, n := range b.Frames {
			fmt.Fprintf(tw, "\t%d", n)
		}
		reasons := make([]string, 0, len(b.Stops))
		for r := range b.Stops {
			reasons = append(reasons, r)
		}
		slices.SortFunc(reasons, func(x, y string) int { return cmp.Compare(b.Stops[y], b.Stops[x]) })
		fmt.Fprint(tw, "\t")
		for i, r := range reasons {
			if i > 0 {
				fmt.Fprint(tw, ", ")
			}
			fmt.Fprintf(tw, "%s %d", r, b.Stops[r])
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// KernelText says in a line how the walks over tables in the kernel went
// and how the kernel's tables fare; "" without tables.
func (s *UnwindStats) KernelText() string {
	k := s.Kernel
	if k == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "unwinding in the kernel: %d samples whole, %d partial; %d tables loaded (%d rows, %.1f of %.0f MiB; %d in the kernel's form from the store), %d evicted (%d loaded again when a walk needed them), %d tables or mappings refused (%d for want of room in the lookup map)",
		s.KernelWhole, s.KernelPartial, k.Loaded, k.Rows, float64(k.Used)/(1<<20), float64(k.Budget)/(1<<20), s.KernelStored, k.Evicted, s.KernelReloaded, s.KernelErrors, k.MappingsRefused)
	if s.KernelErr != nil {
		fmt.Fprintf(&b, " (first: %v)", s.KernelErr)
	}
	b.WriteString("; walks ended:")
	for i, r := range slices.Sorted(maps.Keys(k.Walks)) {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, " %s %d", r, k.Walks[r])
	}
	return b.String()
}
