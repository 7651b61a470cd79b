#!/bin/sh
# Measures what sprof's off-CPU profiling costs a context-switch storm
# (issue 16). The fixture's two threads ping-pong a byte through pipes,
# four system calls a round trip, in one storm that lasts the whole
# measurement, while the script runs
#
#   sprof record --off-cpu --cpu=false --off-cpu-min 1ms
#
# (every process on the host) CYCLES times for SECONDS, with SECONDS
# without sprof before, between and after. The storm counts its round
# trips in slices of 100 ms. A period's rate is the median of the slices
# wholly inside it: the median passes over the one slice a second that
# the kernel's real-time throttling halves (the storm runs SCHED_FIFO, and
# by default such tasks get 950 ms a second), and sprof's start, its
# first second (while the sys_exit hook's governor finds the storm's
# system calls over its budget and turns the hook off) and its exit lie
# outside the periods. Each period under sprof is compared with the mean
# of the periods alone just before and after it: this VM's speed drifts by
# up to a tenth from one second to another, as other guests come and go,
# and a comparison of neighbours cancels most of it, which comparing
# separate storms of a few seconds did not.
#
# It prints each cycle's rates and change, their median and spread, the
# load average before and after, and sprof's own CPU time in its periods;
# then runs sprof once more with --stats, whose BPF run-time statistics
# cost every BPF program two clock reads a run (so not in a measured
# period), for sprof's figures: its BPF ns per context switch, records,
# drops. In a long run the governor turns the hook on again every 15 s,
# for half a second, to look at the rate: about 3% of the time at the
# traced system call's cost, which the periods, shorter than 15 s, leave
# out.
#
# The threads run on any CPU, as in the storm issue 16 describes (two
# threads, a pipe, this 2-vCPU VM): each wakes the other on the other CPU,
# and every round trip is four context switches (each CPU to idle and
# back), 160,000-180,000 a second. STORM_CPUS=LIST pins them (taskset -c
# LIST); with STORM_CPUS=0 both share CPU 0, two switches a round trip
# but twice the round trips: twice the switches per CPU-second, the
# harshest storm, where a BPF program that returns at once on sched_switch
# already costs 5% (BenchmarkOffCPU). The storm runs SCHED_FIFO (chrt -f
# 1) unless STORM_FIFO=0, so that other work takes little of its CPUs'
# time: then round trips per second measure the storm rather than the
# host's load. It fails only when the storm or sprof fails, a period holds
# no whole slice, or sprof prints no statistics: the figures are for a
# person to read, not a bar a loaded machine could miss by chance.
#
# usage: sudo scripts/offcpu-storm.sh [CYCLES [SECONDS]]   (default 12 cycles of 3 s)
#   SPROF=path  the sprof binary (default: built from this tree)
set -eu
cd "$(dirname "$0")/.."
cycles=${1:-12}
seconds=${2:-3}
slice_ms=100
fixture=testdata/bpf/offcpu
pin=""
[ -z "${STORM_CPUS:-}" ] || pin="taskset -c $STORM_CPUS"
[ "$(id -u)" = 0 ] || { echo "offcpu-storm: needs root (BPF)" >&2; exit 1; }
[ -z "$pin" ] || command -v taskset >/dev/null || { echo "offcpu-storm: needs taskset (util-linux)" >&2; exit 1; }
tmp=$(mktemp -d)
storm_pid="" pid=""
trap 'for p in $storm_pid $pid; do kill -TERM $p 2>/dev/null || true; done; rm -rf "$tmp"' EXIT
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

# cputicks PID: the process's CPU time (utime+stime) in clock ticks, of
# which there are hz a second.
cputicks() { awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

# settle PID: waits, at most 60 s, until sprof's start-up (reading every
# process, loading the programs) is over, that is until it takes at most
# one tick of CPU in a second.
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

# period KIND: a period of $seconds, noted in periods.txt as KIND and its
# start and end on /proc/uptime's clock (CLOCK_BOOTTIME, in hundredths of
# a second).
period() {
	s=$(cut -d' ' -f1 /proc/uptime)
	sleep "$seconds"
	echo "$1 $s $(cut -d' ' -f1 /proc/uptime)" >>"$tmp/periods.txt"
}

# start_sprof [FLAG]: starts sprof, given FLAG, and waits until it runs
# and its start-up is over; sets pid.
start_sprof() {
	log=$tmp/sprof.log
	"$sprof" record --off-cpu --cpu=false --off-cpu-min 1ms ${1:-} -o "$tmp/out.pb.gz" 2>"$log" &
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
	sleep 1
}

stop_sprof() {
	kill -INT $pid
	wait $pid || { cat "$log" >&2; echo "offcpu-storm: sprof failed" >&2; exit 1; }
	pid=""
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); storm ${pin:-on every CPU}${rt:+ under $rt}"
$rt $pin "$fixture" storm 0 $slice_ms </dev/null >"$tmp/storm.txt" &
storm_pid=$!
: >"$tmp/periods.txt"
: >"$tmp/sprof-ticks.txt"
i=1
while [ $i -le "$cycles" ]; do
	period alone
	start_sprof
	t0=$(cputicks $pid)
	period sprof
	echo $(($(cputicks $pid) - t0)) >>"$tmp/sprof-ticks.txt"
	stop_sprof
	i=$((i + 1))
done
period alone
start_sprof --stats
sleep "$seconds"
stop_sprof
kill -TERM $storm_pid
wait $storm_pid || { echo "offcpu-storm: the storm failed" >&2; exit 1; }
storm_pid=""
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

# Each period's slices as "PERIOD RATE" (round trips a second), sorted,
# then each period's median: "PERIOD KIND MEDIAN SLICES".
awk -v slice=$((slice_ms * 1000000)) '
	FNR == NR { kind[NR] = $1; from[NR] = ($2 + 0.01) * 1e9; to[NR] = $3 * 1e9; n = NR; next }
	/^slice_ns=/ {
		split($1, a, "="); split($2, b, "=")
		for (p = 1; p <= n; p++)
			if (a[2] >= from[p] && a[2] + slice <= to[p])
				print p, kind[p], b[2] * 1e9 / slice
	}' "$tmp/periods.txt" "$tmp/storm.txt" | sort -k1,1n -k3,3n >"$tmp/slices.txt"
awk '
	function flush() { if (c) print p, k, (c % 2) ? v[(c + 1) / 2] : (v[c / 2] + v[c / 2 + 1]) / 2, c }
	$1 != p { flush(); p = $1; k = $2; c = 0 }
	{ v[++c] = $3 }
	END { flush() }' "$tmp/slices.txt" >"$tmp/medians.txt"
periods=$(wc -l <"$tmp/periods.txt")
[ "$(wc -l <"$tmp/medians.txt")" = "$periods" ] || { echo "offcpu-storm: a period of $seconds s held no whole slice of the storm" >&2; exit 1; }

# Each cycle: the period under sprof against the mean of its neighbours.
# A cycle whose neighbours differ by more than 5%, the host's speed having
# changed by more than the effect measured, is marked drifted.
awk '
	{ kind[$1] = $2; rate[$1] = $3; slices[$1] = $4 }
	END {
		for (p = 2; p < NR; p += 2) {
			alone = (rate[p - 1] + rate[p + 1]) / 2
			drift = rate[p + 1] - rate[p - 1]
			printf "cycle %d: alone %.0f, under sprof %.0f, alone %.0f round trips/s (%d, %d, %d slices)%s: %+.2f%%\n",
				p / 2, rate[p - 1], rate[p], rate[p + 1], slices[p - 1], slices[p], slices[p + 1],
				(drift > 0.05 * alone || -drift > 0.05 * alone) ? " drifted" : "", 100 * (rate[p] - alone) / alone
		}
	}' "$tmp/medians.txt" | tee "$tmp/cycles.txt"

# median FILE COLUMN, spread FILE COLUMN
median() { sort -n -k"$2","$2" "$1" | awk -v c="$2" '{ v[NR] = $c } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
spread() { sort -n -k"$2","$2" "$1" | awk -v c="$2" 'NR == 1 { lo = $c } { hi = $c } END { print lo ".." hi }'; }
sed 's/.*: //; s/%$//' "$tmp/cycles.txt" >"$tmp/change.txt"
grep -v " drifted:" "$tmp/cycles.txt" | sed 's/.*: //; s/%$//' >"$tmp/steady.txt" || true
steady="none not drifted"
[ -s "$tmp/steady.txt" ] && steady="$(wc -l <"$tmp/steady.txt") not drifted: median $(median "$tmp/steady.txt" 1)% ($(spread "$tmp/steady.txt" 1)%)"
echo "change under sprof: median $(median "$tmp/change.txt" 1)% ($(spread "$tmp/change.txt" 1)%) in $cycles cycles of $seconds s; $steady"
awk -v hz="$hz" '{ print $1 * 1000 / hz }' "$tmp/sprof-ticks.txt" >"$tmp/sprof-ms.txt"
echo "sprof's own CPU time in each period under it: median $(median "$tmp/sprof-ms.txt" 1) ms ($(spread "$tmp/sprof-ms.txt" 1) ms) in $seconds s"
echo "with --stats, $seconds s:"
grep -E "off-CPU|BPF run-time" "$tmp/sprof.log" | sed 's/^/  /'
grep -q "off-CPU programs:" "$tmp/sprof.log" || { echo "offcpu-storm: sprof --stats printed no off-CPU statistics" >&2; exit 1; }
