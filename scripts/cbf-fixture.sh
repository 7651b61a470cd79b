#!/bin/sh
# Rebuilds testdata/cbf/gobuild.sprof, a recording of real stacks: perf
# samples (perf record -g, frame pointers) of the Go toolchain compiling the
# standard library, converted by TestPerfFixture in cbf/recording. Prints
# the size of perf.data next to the recording's. Needs perf and root (or
# perf_event_paranoid <= 1). testdata/cbf/gobuild-v2.sprof, an earlier run
# as format version 2 stored it, stays as it is: it is how the reader is held
# to reading old recordings, and no version 2 writer is left to rebuild it.
#   usage: scripts/cbf-fixture.sh [SECONDS]   (default 20)
set -eu
cd "$(dirname "$0")/.."
secs=${1:-20}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# A cold build of std keeps the compiler busy, with deep Go stacks.
GOCACHE="$tmp/cache" CGO_ENABLED=0 timeout -s INT "$secs" \
	perf record -g --sample-cpu -F 99 -o "$tmp/perf.data" -- go build -a -o /dev/null std || true
perf script -i "$tmp/perf.data" -D > "$tmp/dump.txt" 2>/dev/null
perf buildid-list -i "$tmp/perf.data" --with-hits > "$tmp/buildids.txt" 2>/dev/null
go test ./cbf/recording -run '^TestPerfFixture$' -v -perfdump "$tmp/dump.txt" -buildids "$tmp/buildids.txt" | grep -E 'perf sample|ok|FAIL'
echo "perf.data: $(stat -c %s "$tmp/perf.data") bytes; testdata/cbf/gobuild.sprof: $(stat -c %s testdata/cbf/gobuild.sprof) bytes"
