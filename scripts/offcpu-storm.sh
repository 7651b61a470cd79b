#!/bin/sh
# Measures what sprof's off-CPU profiling costs a context-switch storm
# (issue 16): the fixture's two threads ping-pong a byte through pipes on
# CPU 0, where every round trip is two context switches and four system
# calls, once alone and once under
#
#   sprof record --off-cpu --cpu=false --off-cpu-min 1ms
#
# (every process on the host) alternately, RUNS times each. Every storm
# lasts SECONDS; under sprof, once sprof's start-up is over (at most one
# clock tick, 10 ms, of its CPU time in a second), a one-second storm runs first,
# unmeasured, for the sys_exit hook's governor to settle (the storm's
# system calls are over its budget). It prints each run's round trips per
# second and per CPU-second of the storm's own threads (the steadier
# figure on a loaded host), the medians, their spread (lowest..highest)
# and the change under sprof, with the load average before and after, and
# sprof's own CPU time during the measured storms; then one more storm
# under sprof with --stats, whose BPF run-time statistics cost every BPF
# program two clock reads a run (so it is not one of the measured runs),
# for sprof's figures: its BPF ns per context switch, records, drops.
#
# The storm runs SCHED_FIFO (chrt -f 1) unless STORM_FIFO=0, so that
# other work on CPU 0 takes little of its time: then round trips per
# second measure the storm rather than the host's load. It fails only when
# the storm or sprof fails or sprof prints no statistics: the figures are
# for a person to read, not a bar a loaded machine could miss by chance.
#
# usage: sudo scripts/offcpu-storm.sh [RUNS [SECONDS]]   (default 5 runs of 2 s)
#   SPROF=path  the sprof binary (default: built from this tree)
set -eu
cd "$(dirname "$0")/.."
runs=${1:-5}
seconds=${2:-2}
fixture=testdata/bpf/offcpu
[ "$(id -u)" = 0 ] || { echo "offcpu-storm: needs root (BPF)" >&2; exit 1; }
command -v taskset >/dev/null || { echo "offcpu-storm: needs taskset (util-linux)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sprof=${SPROF:-}
if [ -z "$sprof" ]; then
	go build -o "$tmp/sprof" ./cmd/sprof
	sprof=$tmp/sprof
fi
rt=""
if [ "${STORM_FIFO:-1}" != 0 ] && command -v chrt >/dev/null; then
	# A container or a VM without CAP_SYS_NICE refuses real-time policies.
	if chrt -f 1 true 2>/dev/null; then
		rt="chrt -f 1"
	else
		echo "offcpu-storm: chrt -f refused here; the storm runs SCHED_OTHER" >&2
	fi
fi

# storm SECONDS: prints "trips/s trips/cpu-s" of one storm.
storm() {
	out=$(echo go | $rt taskset -c 0 "$fixture" storm "$1") || { echo "offcpu-storm: the storm failed" >&2; exit 1; }
	[ -n "$out" ] || { echo "offcpu-storm: the storm printed nothing" >&2; exit 1; }
	echo "$out" | awk -v s="$1" -F'[= ]' '{ printf "%.0f %.0f\n", $2 / s, $2 / ($4 / 1e9) }'
}

# cputicks PID: the process's CPU time (utime+stime) in clock ticks, of
# which there are hz a second.
cputicks() { awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

# settle PID: waits, at most 60 s, until sprof's start-up (reading every
# process, loading the programs) is over, that is until it takes at most
# one tick of CPU in a second: start-up work on the storm's CPU is not the
# steady cost the storm measures.
settle() {
	t=0
	prev=$(cputicks "$1")
	while [ $t -lt 60 ]; do
		sleep 1
		now=$(cputicks "$1")
		[ $((now - prev)) -le 1 ] && return
		prev=$now
		t=$((t + 1))
	done
	echo "offcpu-storm: sprof still busy after 60 s; measuring anyway" >&2
}

# under_sprof SECONDS [FLAG]: one storm under sprof, which is given FLAG.
under_sprof() {
	log=$tmp/sprof.log
	"$sprof" record --off-cpu --cpu=false --off-cpu-min 1ms ${2:-} -o "$tmp/out.pb.gz" 2>"$log" &
	pid=$!
	tries=0
	until grep -q "Ctrl-C to stop" "$log"; do
		tries=$((tries + 1))
		if [ $tries -gt 600 ] || ! kill -0 $pid 2>/dev/null; then
			cat "$log" >&2
			echo "offcpu-storm: sprof did not start" >&2
			exit 1
		fi
		sleep 0.1
	done
	settle $pid
	storm 1 >/dev/null
	t0=$(cputicks $pid)
	storm "$1"
	echo $(($(cputicks $pid) - t0)) >>"$tmp/sprof-ticks.txt"
	kill -INT $pid
	wait $pid || { cat "$log" >&2; echo "offcpu-storm: sprof failed" >&2; exit 1; }
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)${rt:+; storm under $rt}"
: >"$tmp/alone.txt"
: >"$tmp/under.txt"
: >"$tmp/sprof-ticks.txt"
i=1
while [ $i -le "$runs" ]; do
	a=$(storm "$seconds")
	b=$(under_sprof "$seconds")
	echo "$a" >>"$tmp/alone.txt"
	echo "$b" >>"$tmp/under.txt"
	echo "run $i: alone $a, under sprof $b (round trips per second, per CPU-second)"
	i=$((i + 1))
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

# median FILE COLUMN, spread FILE COLUMN
median() { sort -n -k"$2","$2" "$1" | awk -v c="$2" '{ v[NR] = $c } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
spread() { sort -n -k"$2","$2" "$1" | awk -v c="$2" 'NR == 1 { lo = $c } { hi = $c } END { print lo ".." hi }'; }
# Each run's change under sprof against the storm alone just before it,
# which load that comes and goes moves less than the medians.
paste "$tmp/alone.txt" "$tmp/under.txt" |
	awk '{ printf "%.2f %.2f\n", 100 * ($3 - $1) / $1, 100 * ($4 - $2) / $2 }' >"$tmp/change.txt"
for col in 1 2; do
	what="round trips per second"
	[ $col = 2 ] && what="round trips per CPU-second"
	ma=$(median "$tmp/alone.txt" $col)
	ms=$(median "$tmp/under.txt" $col)
	echo "$what: alone median $ma ($(spread "$tmp/alone.txt" $col)), under sprof median $ms ($(spread "$tmp/under.txt" $col)): $(awk -v a="$ma" -v s="$ms" 'BEGIN { printf "%+.1f%%", 100 * (s - a) / a }');" \
		"change per run median $(median "$tmp/change.txt" $col)% ($(spread "$tmp/change.txt" $col)%)"
done
awk -v hz="$hz" '{ print $1 * 1000 / hz }' "$tmp/sprof-ticks.txt" >"$tmp/sprof-ms.txt"
echo "sprof's own CPU time during each measured storm: median $(median "$tmp/sprof-ms.txt" 1) ms ($(spread "$tmp/sprof-ms.txt" 1) ms) in $seconds s"
echo "with --stats: $(under_sprof "$seconds" --stats)"
grep -E "off-CPU|BPF run-time" "$tmp/sprof.log" | sed 's/^/  /'
grep -q "off-CPU programs:" "$tmp/sprof.log" || { echo "offcpu-storm: sprof --stats printed no off-CPU statistics" >&2; exit 1; }
