// Package pyroscope sends sprof profiles to Grafana Pyroscope, the store
// SREs query flame graphs from, with the official Connect client of the
// Push API (push.v1.PusherService/Push) and the legacy /ingest endpoint as
// a fallback for servers and proxies that only know that.
//
// A profile leaves as pprof in the Go runtime's CPU shape, so Pyroscope
// files it as process_cpu, one series per service — the configured service
// name, or each process's command name (Services) — and, for processes in
// containers, per container, labelled container_id (Split). The split
// lives here once, for Push and for callers such as sprof agent that queue
// series themselves and send them with Send, which sends every profile in
// a request of its own, many at a time, so that a refused one can be sent
// again without storing the others twice.
//
// Pyroscope rejects or silently mangles profiles past its limits, so the
// client stays inside them itself: it splits a series whose pprof would exceed 16,000 samples or
// 4 MiB uncompressed into several profiles, caps stacks at 1,000 frames
// with a visible `[truncated]` marker, keeps per-sample pid/tid labels out
// (each distinct label set would become a series), checks series labels
// before the first push, and never sends data older than an hour, which
// the server would refuse. It paces its requests to the tenant's ingestion
// rate limit (Pacer), since the server refuses the profiles past it. Only
// failures the server calls transient are retried, with bounded backoff,
// among them the Unavailable a starting server quotes in its answers
// (BackendUnavailable).
package pyroscope
