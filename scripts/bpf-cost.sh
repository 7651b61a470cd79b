#!/bin/sh
# Measures what the sampling program costs per sample on this host, for
# issue 13's goal (at most 3 us for a 32-frame stack without frame
# pointers, on a 16-CPU host): BenchmarkTableWalk's probed path, fixtures
# recursing 1, 32 and then 400 frames of 256 bytes without frame
# pointers (6, 37 and 405 frames with main and libc's start code) at
# 499 Hz, the kernel's BPF run-time statistics divided by the samples
# sent.
#
# The goal was set beside figures for a shallow stack (5 frames) on its
# host: sprof's stack-copy path 1.8-3.1 us a sample, the OpenTelemetry
# profiler 2.9-4.3 us. The copy path at 6 frames, which the benchmark
# measures after each walk, is printed too: set beside it, a host's
# figures say how that host compares with the one of the goal. So is
# BenchmarkFloor, what programs that do next to nothing cost per run on
# the same events and load (empty, the pid filter, a minimal record
# filled, sent through the ring buffer all CPUs share, and through one of
# the CPU's own): the part of a sample's cost that is the host's.
#
# Shared hosts drift by half from one minute to the next (the 16-CPU host
# of issue 13's figures did), so two builds are compared only round by
# round: with BASELINE set, each round runs both, the one first that ran
# second in the round before.
#
# It prints each run's bpf-ns/sample, frames/sample and the copy's
# bpf-ns/sample at each depth, then per build the median of each depth,
# the cost of a frame between the two deeper ones (the slope), the cost at
# no frame at all (the intercept), which is what a sample costs besides
# its walk, the medians at 6 frames, the walk's and the copy's, and the
# floor's (a build without depth 1 or BenchmarkFloor prints none of
# those).
#
# Usage: scripts/bpf-cost.sh [ROUNDS]   (default 5)
# Environment:
#   BPF_TEST   the bpf test binary to measure (default: built here with
#              go test -c ./bpf)
#   BASELINE   another build's bpf test binary, interleaved with it
#   BENCHTIME  -test.benchtime (default 10x: ten drains of a quarter ring;
#              for the floor, ten tenths of a second). The ring is sized
#              for every CPU and two fill it: on a 16-CPU host one build's
#              run took 3 minutes at 10x and 2 at 3x, so two rounds of
#              two builds there need a 10-minute call
#   PHASES     set: after the rounds, BenchmarkTableWalkPhases of BPF_TEST
#              once, where a sample's time goes at 6 and 37 frames
# Run as root from anywhere in the repository; the test binaries run in
# bpf/, where their fixtures are found.
set -eu
cd "$(dirname "$0")/.."
rounds=${1:-5}
benchtime=${BENCHTIME:-10x}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT INT TERM

if [ -z "${BPF_TEST:-}" ]; then
	BPF_TEST=$out/bpf.test
	go test -c -o "$BPF_TEST" ./bpf
fi
BPF_TEST=$(realpath "$BPF_TEST")
builds="test"
if [ -n "${BASELINE:-}" ]; then
	BASELINE=$(realpath "$BASELINE")
	builds="test baseline"
fi

# run BUILD ROUND: one benchmark run, its results appended to $out/all as
# "build depth bpf-ns/sample frames/sample copy-bpf-ns/sample", and
# BenchmarkFloor's as "build floor-NAME bpf-ns/run 0 0".
run() {
	bin=$BPF_TEST
	[ "$1" = baseline ] && bin=$BASELINE
	if ! (cd bpf && "$bin" -test.run '^$' -test.bench 'TableWalk/probed|Floor' -test.benchtime "$benchtime") >"$out/run" 2>&1; then
		cat "$out/run" >&2
		echo "bpf-cost: $1 failed in round $2" >&2
		exit 1
	fi
	awk -v build="$1" '
		/^BenchmarkTableWalk\/probed\/depth=/ {
			depth = $1
			sub(/^.*depth=/, "", depth)
			sub(/-[0-9]+$/, "", depth)
			for (i = 2; i < NF; i++) {
				if ($(i + 1) == "bpf-ns/sample") ns = $i
				if ($(i + 1) == "frames/sample") frames = $i
				if ($(i + 1) == "copy-bpf-ns/sample") copy = $i
			}
			print build, depth, ns, frames, copy
		}
		/^BenchmarkFloor\// {
			name = $1
			sub(/^BenchmarkFloor\//, "", name)
			sub(/-[0-9]+$/, "", name)
			for (i = 2; i < NF; i++)
				if ($(i + 1) == "bpf-ns/run") ns = $i
			print build, "floor-" name, ns, 0, 0
		}' "$out/run" | tee -a "$out/all" | sed "s/^/round $2: /"
}

round=1
while [ "$round" -le "$rounds" ]; do
	order=$builds
	if [ $((round % 2)) -eq 0 ] && [ -n "${BASELINE:-}" ]; then
		order="baseline test"
	fi
	for build in $order; do
		run "$build" "$round"
	done
	round=$((round + 1))
done

# median BUILD DEPTH COLUMN: the median of a column (3: ns, 4: frames,
# 5: the copy's ns); it fails where there is none.
median() {
	awk -v b="$1" -v d="$2" -v c="$3" '$1 == b && $2 == d { print $c }' "$out/all" | sort -g |
		awk '{ v[NR] = $1 } END { if (NR == 0) exit 1; print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

echo "bpf-cost: $rounds rounds on $(nproc) CPUs, $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg)"
for build in $builds; do
	ns32=$(median "$build" 32 3)
	fr32=$(median "$build" 32 4)
	ns400=$(median "$build" 400 3)
	fr400=$(median "$build" 400 4)
	awk -v b="$build" -v a="$ns32" -v fa="$fr32" -v z="$ns400" -v fz="$fr400" 'BEGIN {
		slope = (z - a) / (fz - fa)
		printf "%s: median %.0f ns a sample at %.0f frames, %.0f at %.0f; %.1f ns a frame, %.0f ns at none\n",
			b, a, fa, z, fz, slope, a - slope * fa
	}'
	if ns1=$(median "$build" 1 3) && fr1=$(median "$build" 1 4) && copy1=$(median "$build" 1 5); then
		echo "$build: median $ns1 ns a sample at $fr1 frames; the stack copy's $copy1 ns there"
	fi
	floor=""
	for name in empty filter header record percpu; do
		if ns=$(median "$build" "floor-$name" 3); then
			floor="$floor, $name $ns"
		fi
	done
	if [ -n "$floor" ]; then
		echo "$build: floor, median ns a run${floor}"
	fi
done
if [ -n "${PHASES:-}" ]; then
	(cd bpf && "$BPF_TEST" -test.run '^$' -test.bench TableWalkPhases -test.benchtime "$benchtime") >"$out/run" 2>&1 ||
		{ cat "$out/run" >&2; echo "bpf-cost: TableWalkPhases failed" >&2; exit 1; }
	grep '^BenchmarkTableWalkPhases' "$out/run"
fi
