#!/bin/sh
# Measures the memory and CPU of `sprof agent` as a host runs it: the whole
# host at 19 Hz, stack copies and unwinding on (the defaults), with PROCS
# extra processes running (a few busy loops in different programs, the
# rest asleep, every one of them mapping libc and tracked by the agent),
# the GSYM cache warm: a first agent run converts the binaries and is not
# measured; it runs until an interval passes without a conversion, which
# on a loaded host takes minutes (at least WARM_MIN seconds, default 0,
# for runs to be compared: conversions can come in bursts; at most
# WARM_MAX seconds, default 600;
# its metrics are served on 127.0.0.1:METRICS_PORT, default 19465, read
# with curl). Every 5 s it reads the agent's VmRSS and VmHWM from
# /proc/PID/status; at the end it prints the steady RSS (the median and
# the largest after the first two intervals), the peak (VmHWM), the
# agent's CPU time (utime+stime from /proc/PID/stat, which other load on
# the host does not inflate as it does a wall-clock share) over the whole
# run and after its first 30 s (start-up: loading the BPF programs,
# reading every process, mapping the tables), and the host's load
# average over the run, to judge it by. Needs root.
# SPROF_BIN names a sprof binary to measure instead of building one
# (for a host without Go); AGENT_PROFILE names a pprof file in which
# sprof records the agent's own CPU profile over the measured run.
#   usage: scripts/agent-rss.sh [SECONDS [PROCS [AGENT FLAGS...]]]
#          (default 600 s, 300 processes; e.g. --symbol-cache 32M)
set -eu
cd "$(dirname "$0")/.."
secs=${1:-600}
procs=${2:-300}
shift $(($# < 2 ? $# : 2))
tmp=$(mktemp -d)
pids=""
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
if [ -n "${SPROF_BIN:-}" ]; then
	cp "$SPROF_BIN" "$tmp/sprof"
else
	go build -o "$tmp/sprof" ./cmd/sprof
fi

# A few busy programs, each a different binary for the symbolizer and
# the unwinder; the rest sleep.
busy=0
for cmd in "sh -c 'while :; do :; done'" "perl -e '1 while 1'" \
	"python3 -c 'while True: pass'" "awk 'BEGIN{while(1){}}'" \
	testdata/unwind/spin-ehframe testdata/unwind/spin-sframe; do
	prog=${cmd%% *}
	if command -v "$prog" >/dev/null 2>&1 || [ -x "$prog" ]; then
		eval "exec nice -n 19 $cmd" >/dev/null 2>&1 &
		pids="$pids $!"
		busy=$((busy + 1))
	fi
done
i=$busy
while [ "$i" -lt "$procs" ]; do
	sleep 100000 &
	pids="$pids $!"
	i=$((i + 1))
done

run_agent() { # SECONDS
	"$tmp/sprof" agent --output-dir "$tmp/out" --keep 4 --cache-dir "$tmp/cache" "$@" 2>"$tmp/agent.log" &
	agent=$!
}

# Warm the GSYM cache: convert what the host runs, then stop, once two
# intervals were named and the last 15 s converted nothing more.
port=${METRICS_PORT:-19465}
metric() { # NAME
	curl -fs "http://127.0.0.1:$port/metrics" | awk -v m="$1" '$1 == m {print $2}'
}
warm0=$(date +%s)
run_agent --metrics-addr "127.0.0.1:$port" "$@"
converted=-1
while [ $(($(date +%s) - warm0)) -lt "${WARM_MAX:-600}" ]; do
	sleep 15
	kill -0 "$agent" 2>/dev/null || { echo "agent exited:"; cat "$tmp/agent.log"; exit 1; }
	n=$(metric sprof_agent_intervals_total)
	c=$(metric 'sprof_agent_gsym_binaries_total{result="converted"}')
	[ "${n:-0}" -ge 2 ] && [ "$c" = "$converted" ] &&
		[ $(($(date +%s) - warm0)) -ge "${WARM_MIN:-0}" ] && break
	converted=$c
done
echo "GSYM cache warmed in $(($(date +%s) - warm0)) s: ${c:-?} binaries converted"
kill -TERM "$agent"
wait "$agent" || true

run_agent "$@"
load0=$(cut -d' ' -f1 /proc/loadavg)
hz=$(getconf CLK_TCK)
start=$(date +%s)
if [ -n "${AGENT_PROFILE:-}" ]; then
	"$tmp/sprof" record -p "$agent" -F 499 -d "${secs}s" -o "$AGENT_PROFILE" 2>"$tmp/profile.log" &
fi
: >"$tmp/rss"
cpu30= t30=
while [ $(($(date +%s) - start)) -lt "$secs" ]; do
	sleep 5
	kill -0 "$agent" 2>/dev/null || { echo "agent exited:"; cat "$tmp/agent.log"; exit 1; }
	t=$(($(date +%s) - start))
	awk -v t=$t '/^VmRSS:/ {r=$2} /^VmHWM:/ {h=$2} END {print t, r, h}' "/proc/$agent/status" >>"$tmp/rss"
	if [ -z "$cpu30" ] && [ "$t" -ge 30 ]; then
		cpu30=$(awk '{print $14 + $15}' "/proc/$agent/stat") t30=$t
	fi
done
cpu=$(awk '{print $14 + $15}' "/proc/$agent/stat")
tend=$(($(date +%s) - start))
load1=$(cut -d' ' -f1 /proc/loadavg)
# Where the RSS is at the end: the Go heap and runtime (anonymous), the
# agent's own binary, the GSYM files mapped, the BPF maps and rings.
awk -v exe="$tmp/sprof" '/^[0-9a-f]+-[0-9a-f]+ / {
	k = "other files"
	if (NF < 6) k = "anonymous (Go heap, stacks)"
	else if ($6 == exe) k = "sprof binary"
	else if ($6 ~ /\.gsym$/) k = "GSYM files"
	else if ($6 ~ /^anon_inode:bpf/) k = "BPF maps and ring"
	else if ($6 ~ /^\[/) k = "anonymous (Go heap, stacks)"
}
/^Rss:/ { rss[k] += $2 }
END { for (k in rss) printf "  %-28s %6.1f MB\n", k, rss[k] / 1024 }' "/proc/$agent/smaps" | sort >"$tmp/smaps"
hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/$agent/status")
kill -TERM "$agent"
wait "$agent" || true

# Steady: after the first two 15 s intervals.
awk '$1 > 30 {print $2}' "$tmp/rss" | sort -n >"$tmp/steady"
n=$(wc -l <"$tmp/steady")
median=$(sed -n "$(((n + 1) / 2))p" "$tmp/steady")
max=$(tail -n 1 "$tmp/steady")
awk -v m="$median" -v x="$max" -v hwm="$hwm" -v cpu="$cpu" -v hz="$hz" -v secs="$secs" -v procs="$procs" -v busy="$busy" \
	-v load0="$load0" -v load1="$load1" -v cpu30="${cpu30:-0}" -v t30="${t30:-0}" -v tend="$tend" 'BEGIN {
	printf "agent, %d s, 19 Hz host-wide, %d extra processes (%d busy): RSS steady median %.1f MB, max %.1f MB; peak (VmHWM) %.1f MB; CPU %.1f s (%.2f%% of one core), after the first %d s %.2f%%; host load %s to %s\n",
		secs, procs, busy, m / 1024, x / 1024, hwm / 1024, cpu / hz, 100 * cpu / hz / secs,
		t30, (tend > t30 ? 100 * (cpu - cpu30) / hz / (tend - t30) : 0), load0, load1
}'
cat "$tmp/smaps"
