// Package agent runs sprof as a continuous profiler: it samples the whole
// host at a low rate for as long as it runs and, every interval (15 s by
// default), sends one CPU profile per service to Grafana Pyroscope and/or
// writes it as a pprof file, so that an SRE can look at last Tuesday's
// flame graph instead of reproducing last Tuesday's incident.
//
// An agent lives for weeks on hosts it must not disturb, so it keeps one
// pipeline (package pipeline: sampler, collector, unwinder, symbolizer,
// wired as for `sprof record`, stack copies included) for its whole life:
// the process table, the unwind tables and the symbolizer's tables carry
// over from one interval to the next (collector.Collector.CutInterval), so
// a binary is read once, not every 15 s. Its drain goroutine only drains
// and cuts; each interval's frames are named on a second goroutine, so
// that the first intervals, which convert every binary a host runs, do
// not stop the drains and overflow the ring. What can fail is bounded:
// profiles wait for an unreachable server in a queue of a fixed number of
// intervals, and deliveries resume by themselves, oldest interval first,
// when the server is back. An interval's profiles are sent each in a
// request of its own, many at a time (pyroscope.Client.Send, or an OTLP
// export per series), so that one refused can be sent again without
// storing the others twice, paced to the server's ingestion rate limit;
// delivery time grows only by a server round trip per 32 services. A
// profile the server answers as unavailable is sent again; one it refuses
// for good is written out with its interval. An interval the queue pushes out, or that is still queued
// when the flush at exit runs out of time, is written to the output
// directory's unsent-* directory when there is one, and dropped and
// counted when not; at exit the log says how many intervals were
// delivered, written out or dropped. Files are rotated to the newest
// intervals. The agent's
// own counters — samples, lost samples, and for each destination the
// intervals delivered, written out or dropped, profiles sent, drops and
// bytes sent, the symbolizer's cache hits or GSYM conversions — are
// served in Prometheus
// text format, because a profiler that silently stops sending is worse
// than none.
//
// A service is what Pyroscope files a series under: one name for the whole
// host, or each process's command name — the main thread's, since worker
// threads are often named after their pool ("tokio-runtime-w") — cut at
// its first '/', so kernel threads such as kworker/3:1 make one service,
// not one per CPU. Processes in containers add a container_id label with
// the container's ID, so two containers running the same program are two
// series (pyroscope.Split says why the ID is a label, not the service
// name); the agent splits profiles the same way for Pyroscope and for its
// output directory.
//
// Credentials come from a file or the environment (LoadCredentials),
// never from the command line, where every user on the host can read
// them in /proc/PID/cmdline.
package agent
