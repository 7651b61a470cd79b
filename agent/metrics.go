package agent

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sprof/sprof/collector"
	"github.com/sprof/sprof/unwind"
)

// dropReason says why a profile was never delivered.
type dropReason uint8

const (
	// dropQueueFull: the destination was unreachable for longer than its
	// queue holds; the oldest interval made room for the newest.
	dropQueueFull dropReason = iota
	// dropTooOld: older than Pyroscope accepts.
	dropTooOld
	// dropRejected: the server refused it for good (invalid, unauthorized).
	dropRejected
	// dropShutdown: still queued when the flush at exit ran out of time.
	dropShutdown
	numDropReasons
)

func (r dropReason) String() string {
	switch r {
	case dropQueueFull:
		return "queue_full"
	case dropTooOld:
		return "too_old"
	case dropRejected:
		return "rejected"
	case dropShutdown:
		return "shutdown"
	}
	return "dropReason(" + strconv.Itoa(int(r)) + ")"
}

// metrics are the agent's own counters; each destination's are its
// delivery's. They are written by the agent's goroutines and read by the
// metrics endpoint, hence atomic.
type metrics struct {
	intervals, samples         atomic.Uint64
	lost, sidebandLost         atomic.Uint64 // totals, as the kernel counts them
	collectorCPU, profileBuild atomic.Int64  // nanoseconds
	collectorErrors            atomic.Uint64
	// skipped counts the intervals dropped before they were named.
	skipped                  atomic.Uint64
	filesWritten, fileErrors atomic.Uint64
	lastInterval             atomic.Int64 // Unix nanoseconds
	// unwind is the userspace unwinder's statistics at the last cut,
	// nil without stack copies.
	unwind atomic.Pointer[collector.UnwindStats]
}

// observe adds one interval's collector statistics.
func (m *metrics) observe(s collector.Stats, end time.Time) {
	m.intervals.Add(1)
	m.samples.Add(s.Samples)
	m.lost.Store(s.Lost)
	m.sidebandLost.Store(s.SidebandLost)
	m.collectorCPU.Add(int64(s.Busy))
	m.profileBuild.Add(int64(s.Build))
	m.collectorErrors.Add(uint64(s.Errors))
	m.lastInterval.Store(end.UnixNano())
}

// promWriter writes the Prometheus text exposition format (version 0.0.4).
type promWriter struct{ w *bufio.Writer }

func (p promWriter) family(name, typ, help string) {
	fmt.Fprintf(p.w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

func (p promWriter) sample(name, labels string, v float64) {
	if labels != "" {
		labels = "{" + labels + "}"
	}
	fmt.Fprintf(p.w, "%s%s %s\n", name, labels, strconv.FormatFloat(v, 'g', -1, 64))
}

// one writes a family with a single unlabelled sample.
func (p promWriter) one(name, typ, help string, v float64) {
	p.family(name, typ, help)
	p.sample(name, "", v)
}

func seconds(ns int64) float64 { return float64(ns) / 1e9 }

// WriteMetrics writes the agent's counters in Prometheus text format.
func (a *Agent) WriteMetrics(w io.Writer) error {
	m := &a.metrics
	p := promWriter{bufio.NewWriter(w)}
	const c, g = "counter", "gauge"
	p.one("sprof_agent_intervals_total", c, "Profiling intervals completed.", float64(m.intervals.Load()))
	p.one("sprof_agent_samples_total", c, "Stack samples aggregated into profiles.", float64(m.samples.Load()))
	p.one("sprof_agent_lost_samples_total", c, "Samples the kernel dropped because the ring buffer was full.", float64(m.lost.Load()))
	p.one("sprof_agent_sideband_lost_total", c, "Process mmap/exec/exit records the kernel dropped; some processes may be unattributed.", float64(m.sidebandLost.Load()))
	p.one("sprof_agent_collector_errors_total", c, "Drains that met a malformed record or a read error.", float64(m.collectorErrors.Load()))
	p.one("sprof_agent_collector_cpu_seconds_total", c, "CPU time spent draining and aggregating samples.", seconds(m.collectorCPU.Load()))
	p.one("sprof_agent_profile_build_seconds_total", c, "Wall time spent resolving and symbolizing profiles.", seconds(m.profileBuild.Load()))
	p.one("sprof_agent_skipped_intervals_total", c, "Intervals dropped before their frames were named, because naming fell behind the cuts.", float64(m.skipped.Load()))
	a.writeDeliveries(p)
	p.one("sprof_agent_files_written_total", c, "Profiles written to the output directory.", float64(m.filesWritten.Load()))
	p.one("sprof_agent_file_errors_total", c, "Profiles that could not be written to the output directory.", float64(m.fileErrors.Load()))
	p.one("sprof_agent_last_interval_timestamp_seconds", g, "When the last interval ended (Unix time).", seconds(m.lastInterval.Load()))
	st := a.rec.SymbolizerStats()
	if cs := st.Cache; cs != nil {
		p.one("sprof_agent_symbolize_cache_hits_total", c, "Symbol table lookups served from the symbolizer's cache.", float64(cs.Hits))
		p.one("sprof_agent_symbolize_cache_misses_total", c, "Symbol table lookups that read a binary.", float64(cs.Misses))
		p.one("sprof_agent_symbolize_cache_evictions_total", c, "Symbol tables dropped to stay within the cache's memory budget.", float64(cs.Evictions))
		p.one("sprof_agent_symbolize_cache_bytes", g, "Approximate memory of the cached symbol tables.", float64(cs.Bytes))
	}
	if gs := st.GSYM; gs != nil {
		const name = "sprof_agent_gsym_binaries_total"
		p.family(name, c, "Binaries the GSYM symbolizer converted to GSYM files, found converted in its cache directory, or could not convert (these are symbolized from ELF).")
		p.sample(name, `result="converted"`, float64(gs.Converted))
		p.sample(name, `result="reused"`, float64(gs.Reused))
		p.sample(name, `result="failed"`, float64(gs.Failed))
	}
	if us := m.unwind.Load(); us != nil {
		writeUnwind(p, us)
	}
	return p.w.Flush()
}

// writeDeliveries writes each destination's counters, labelled
// to="pyroscope" or to="otlp".
func (a *Agent) writeDeliveries(p promWriter) {
	if len(a.deliveries) == 0 {
		return
	}
	const c, g = "counter", "gauge"
	type family struct {
		name, typ, help string
		samples         func(d *delivery, to string)
	}
	for _, f := range []family{
		{"sprof_agent_destination_intervals_total", c, "Intervals by what became of them at each destination: delivered, written to the output directory's spill directory for later, or dropped.",
			func(d *delivery, to string) {
				p.sample("sprof_agent_destination_intervals_total", to+`,result="delivered"`, float64(d.delivered.Load()))
				p.sample("sprof_agent_destination_intervals_total", to+`,result="spilled"`, float64(d.spilled.Load()))
				p.sample("sprof_agent_destination_intervals_total", to+`,result="dropped"`, float64(d.dropped.Load()))
			}},
		{"sprof_agent_pushes_total", c, "Profiles sent, by destination and result; a failed profile is sent again until it is delivered, written out or dropped.",
			func(d *delivery, to string) {
				p.sample("sprof_agent_pushes_total", to+`,result="ok"`, float64(d.sentOK.Load()))
				p.sample("sprof_agent_pushes_total", to+`,result="failed"`, float64(d.sentFailed.Load()))
			}},
		{"sprof_agent_sent_bytes_total", c, "Request bytes sent, by destination, retries included.",
			func(d *delivery, to string) {
				p.sample("sprof_agent_sent_bytes_total", to, float64(d.sender.sentBytes()))
			}},
		{"sprof_agent_dropped_profiles_total", c, "Profiles never delivered, by destination and reason; a profile written to the spill directory counts too.",
			func(d *delivery, to string) {
				for r := range numDropReasons {
					p.sample("sprof_agent_dropped_profiles_total", to+`,reason="`+r.String()+`"`, float64(d.droppedBy[r].Load()))
				}
			}},
		{"sprof_agent_queue_intervals", g, "Intervals waiting to be sent, by destination.",
			func(d *delivery, to string) { p.sample("sprof_agent_queue_intervals", to, float64(d.queue.len())) }},
		{"sprof_agent_queue_capacity_intervals", g, "Intervals a destination's queue holds before it drops the oldest.",
			func(d *delivery, to string) {
				p.sample("sprof_agent_queue_capacity_intervals", to, float64(d.cfg.Queue))
			}},
		{"sprof_agent_last_push_timestamp_seconds", g, "When a profile was last delivered, by destination (Unix time; 0 before the first).",
			func(d *delivery, to string) {
				p.sample("sprof_agent_last_push_timestamp_seconds", to, seconds(d.lastOK.Load()))
			}},
	} {
		p.family(f.name, f.typ, f.help)
		for _, d := range a.deliveries {
			f.samples(d, `to="`+d.to+`"`)
		}
	}
}

// writeUnwind writes the userspace unwinder's counters, what `sprof
// record --debug-unwind` prints, in totals: frames by method and stops by
// reason tell whether stacks are whole.
func writeUnwind(p promWriter, us *collector.UnwindStats) {
	const c, g = "counter", "gauge"
	p.one("sprof_agent_stack_copies_total", c, "Samples that carried a copy of their user stack.", float64(us.Copies))
	p.family("sprof_agent_unwind_samples_total", c, "Samples with a stack copy, by the walk kept: userspace (tables) or bpf (frame pointers).")
	p.sample("sprof_agent_unwind_samples_total", `walk="userspace"`, float64(us.Userspace))
	p.sample("sprof_agent_unwind_samples_total", `walk="bpf"`, float64(us.BPF))
	p.family("sprof_agent_unwind_frames_total", c, "User frames found, by unwinding method.")
	for m, n := range us.Frames {
		p.sample("sprof_agent_unwind_frames_total", `method="`+unwind.Method(m).String()+`"`, float64(n))
	}
	stops := map[string]uint64{}
	for _, b := range us.Binaries {
		for r, n := range b.Stops {
			stops[r] += n
		}
	}
	p.family("sprof_agent_unwind_stops_total", c, "Userspace unwinds by why they stopped; all but \"outermost frame\" are marked [truncated].")
	for _, r := range slices.Sorted(maps.Keys(stops)) {
		p.sample("sprof_agent_unwind_stops_total", `reason="`+r+`"`, float64(stops[r]))
	}
	p.one("sprof_agent_unwind_tables", g, "Unwind tables in memory.", float64(us.Tables))
	p.one("sprof_agent_unwind_table_bytes", g, "Memory of the unwind tables.", float64(us.TableBytes))
	p.one("sprof_agent_unwind_held_samples_total", c, "Samples held back while the unwind table they needed was built.", float64(us.Held))
	if k := us.Kernel; k != nil {
		p.family("sprof_agent_unwind_kernel_samples_total", c, "Samples whose user stack was walked in the kernel over unwind tables (--unwind bpf, auto), whole to the outermost frame or partial.")
		p.sample("sprof_agent_unwind_kernel_samples_total", `walk="whole"`, float64(us.KernelWhole))
		p.sample("sprof_agent_unwind_kernel_samples_total", `walk="partial"`, float64(us.KernelPartial))
		p.one("sprof_agent_unwind_kernel_tables", g, "Unwind tables loaded into the kernel.", float64(k.Loaded))
		p.one("sprof_agent_unwind_kernel_table_bytes", g, "Kernel memory the loaded unwind tables use, of --unwind-tables.", float64(k.Used))
		p.one("sprof_agent_unwind_kernel_tables_evicted_total", c, "Unwind tables evicted from the kernel to make room for others.", float64(k.Evicted))
		p.one("sprof_agent_unwind_kernel_tables_reloaded_total", c, "Evicted unwind tables loaded into the kernel again when a walk ended in their binary.", float64(us.KernelReloaded))
		p.one("sprof_agent_unwind_kernel_tables_refused_total", c, "Unwind tables and mappings the kernel could not take (larger than the space, the lookup map full).", float64(us.KernelErrors))
		p.family("sprof_agent_unwind_kernel_walks_total", c, "Walks over unwind tables in the kernel by how they ended; all but \"outermost frame\" are partial or gave way to the fallback.")
		for _, r := range slices.Sorted(maps.Keys(k.Walks)) {
			p.sample("sprof_agent_unwind_kernel_walks_total", `end="`+r+`"`, float64(k.Walks[r]))
		}
	}
}

// MetricsHandler serves WriteMetrics over HTTP, for Prometheus to scrape.
func (a *Agent) MetricsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		a.WriteMetrics(w) // a failed write is the scraper gone; nothing to do
	})
}
