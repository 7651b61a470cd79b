#!/bin/sh
# Compares the size of an sprof recording with perf.data for the same
# workload at the same rate: both record the whole host at the same time,
# at -F 99 with call stacks, while the Go toolchain compiles the standard
# library from a cold cache (deep stacks, many short-lived processes).
# Needs root and perf. perf runs with -B (no build-ID table), which keeps its
# file smaller than by default: perf 6.1 aborts collecting the build IDs of a
# host-wide recording on this kernel.
#   usage: scripts/recording-size.sh [SECONDS [KEEPDIR]]   (default 20 s; KEEPDIR
#          keeps both files)
set -eu
cd "$(dirname "$0")/.."
secs=${1:-20}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/sprof" ./cmd/sprof

# The workload runs in its own process group, so it can be stopped whole.
GOCACHE="$tmp/cache" CGO_ENABLED=0 setsid go build -a -o /dev/null std &
work=$!
sleep 1
"$tmp/sprof" record -F 99 -d "${secs}s" -o "$tmp/rec.sprof" 2>/dev/null &
sprof=$!
perf record -a -g -B --sample-cpu -F 99 -o "$tmp/perf.data" -- sleep "$secs" 2>/dev/null
wait "$sprof"
kill -- "-$work" 2>/dev/null || true
wait "$work" 2>/dev/null || true

if [ $# -ge 2 ]; then cp "$tmp/perf.data" "$tmp/rec.sprof" "$2"; fi
perf_bytes=$(stat -c %s "$tmp/perf.data")
perf_samples=$(perf report -i "$tmp/perf.data" --stats 2>/dev/null | awk '$1 == "SAMPLE" { print $3; exit }')
"$tmp/sprof" info "$tmp/rec.sprof"
sprof_bytes=$(stat -c %s "$tmp/rec.sprof")
echo "perf.data: $perf_bytes bytes, $perf_samples samples ($((perf_bytes / perf_samples)) bytes/sample)"
echo "sprof:     $sprof_bytes bytes; sprof/perf = $(awk "BEGIN { printf \"%.3f\", $sprof_bytes / $perf_bytes }")"
