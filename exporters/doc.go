// Package exporters encodes a stacks.Profile into the formats SREs feed to
// their tools: pprof for `go tool pprof` and Grafana Pyroscope, folded
// stacks for flamegraph.pl and Pyroscope's /ingest, an interactive SVG
// flame graph (rendered by exporters/flamegraph), and speedscope JSON.
// Pushing to Pyroscope lives in exporters/pyroscope.
//
// Every encoder is a function over the same *stacks.Profile and writes to an
// io.Writer, so `sprof record`, `sprof report` and the agent share one
// implementation per format, and tests can build profiles by hand. The
// encoders keep every frame the profile has: an address no symbol covers is
// shown by its placeholder (`libc.so.6+0x1a2b`, `[unknown] 0x…`) and a stack
// walk that stopped early gets a `[truncated]` root frame, so widths in a
// flame graph stay honest instead of silently shrinking. Names are cleaned
// (valid UTF-8, no control characters; no `;` in folded stacks) because
// they come from symbol tables and task names, i.e. from anyone.
//
// pprof output follows the CPU shape of the Go runtime (samples/count and
// cpu/nanoseconds) and passes, besides the library's CheckValid, the stricter
// checks of CheckPprof that consumers such as Pyroscope rely on: dense IDs,
// addresses inside their mappings, positive values, valid UTF-8.
package exporters
