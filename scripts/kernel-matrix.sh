#!/bin/sh
# Runs sprof's kernel tests on the kernels production hosts run: Debian's own
# kernels (bullseye 5.10, bookworm 6.1, trixie 6.12 and the newest in sid),
# amd64 and arm64, each booted under QEMU's software emulation (TCG; KVM
# cannot run guests on this machine kind) from an initramfs that holds
# busybox, static Go test binaries of ./bpf and ./cmd/sprof, their fixtures
# and the C library the dynamic fixtures need. The VMs run one at a time and
# report over the serial console; a table of kernel x test results and wall
# times is printed at the end, and the exit status is 0 only when no test
# failed and every VM reported.
#
# Kernels and busybox come from Debian's archive through apt-get with an apt
# configuration of their own under the cache directory (sources, lists, an
# empty dpkg status, and a package cache kept even where the host's apt
# configuration turns it off): the host's apt sources, pins and dpkg architectures
# are not touched, so nothing on the host can ever be upgraded from these
# suites. Extracted kernels and tools are cached; a later run needs no
# network unless a cached one is older than a week (then each suite's
# newest is looked up again, and downloaded only when it changed; without
# network the cached one is used).
#
# Environment:
#   SPROF_KERNEL_CACHE  cache directory (default /var/cache/sprof-kernels)
#   SPROF_MATRIX_OUT    where initramfs images and serial logs go
#                       (default /tmp/sprof-kernel-matrix)
#   SPROF_MATRIX        which kernels, as suite/arch words
#                       (default: all of bullseye bookworm trixie sid x amd64 arm64)
#   SPROF_MATRIX_SCOPE  chains (default, make test's), kernel or full: which
#                       tests each VM runs (below)
#   SPROF_MATRIX_VM_TIMEOUT  seconds one VM may run (default 420 for chains,
#                       900 for the others)
#   SPROF_MATRIX_BOOT_TIMEOUT  seconds a VM may take to reach /init (default 120)
#   SPROF_MATRIX_BPF_RUN, SPROF_MATRIX_SPROF_RUN  go test -run patterns that
#                       replace the scope's for ./bpf and ./cmd/sprof
# Arguments: none (fetch, build, boot, table), prepare (fetch and build
# only), fetch (the downloads only), fetch-background (fetch, in the
# background, logging to $SPROF_MATRIX_OUT/fetch.out: make test starts it
# first) or table (the table of the last run's logs).
# Needs root (apt-get), go, qemu-system-x86 and qemu-system-arm, cpio and the
# aarch64 cross libc (libc6-arm64-cross); scripts/install-test-deps.sh
# installs them. Without root or one of them the matrix is skipped with the
# reason, as the kernel tests are; under CI=true it fails instead.
#
# A VM whose kernel dies or hangs before /init has started any test, or
# whose kernel stalls (a soft lockup or an RCU stall: under multi-threaded
# TCG a CPU can stop taking interrupts while another spins in the kernel,
# as bookworm's amd64 kernel did once while bpf's tests attached programs)
# or oopses on an int3 (multi-threaded TCG can run a stale copy of kernel
# code that another CPU is patching, with the breakpoint the patching puts
# there for a moment: sid's amd64 kernel did, in __schedule, as a test
# turned the sched_switch tracepoint on; sprof sets no breakpoints) or
# goes silent (nothing on its console for longer than Go's test timeout,
# which a guest whose kernel still runs prints when a test hangs:
# bullseye's amd64 kernel stopped so twice in TestOffCPUWaits, and
# bookworm's once, the emulator spinning on both host CPUs, and passed on
# the next boot; the retry's reason then says where the vCPUs were) is
# booted once more, with one emulator thread, and the table says so:
# those are the emulator's faults. The guests keep two probes on each
# tracepoint sprof attaches to from boot, so that tests do not patch
# kernel code, which is what those faults followed. A test that fails is
# never rerun. The kernels
# boot with softlockup_panic=1 and softlockup_all_cpu_backtrace=1, and a
# VM that stalls gets a few seconds before it is killed: the panic prints
# the stuck CPU's stack and the others' (a CPU stuck in a TLB flush waits
# on another one: 6.1/amd64 once did, in bpf.test), which quiet would keep
# off the console otherwise, into the first boot's log
# (SUITE-ARCH.boot1.log), for telling the emulator's fault from sprof's.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
cache=${SPROF_KERNEL_CACHE:-/var/cache/sprof-kernels}
out=${SPROF_MATRIX_OUT:-/tmp/sprof-kernel-matrix}
matrix=${SPROF_MATRIX:-"bullseye/amd64 bookworm/amd64 trixie/amd64 sid/amd64 bullseye/arm64 bookworm/arm64 trixie/arm64 sid/arm64"}
go=${GO:-go}

# The tests each VM runs, each once, on the kernel's own path (under
# emulation the bpf tests run only that one; see onEveryPath):
#   chains (the default; make test's, sized for its budget of about 15
#     minutes on 2 cores with all eight VMs): the end-to-end chain tests
#     (frame pointers, none through libc, threads, PLT leaves, kernel
#     frames, pprof output and what the kernel cannot do said at start;
#     from 5.17 on, with the walk over unwind tables, which they fail
#     without), loading the sampler with every option and as record and
#     agent open it, and the off-CPU program's (1-3 s a VM).
#   kernel (make kernel-matrix): also `sprof check` against the kernel's
#     facts and the bpf tests of what differs between kernels: the
#     frame-pointer walk with its leaf and PLT rules and stack switches
#     (Go's runtime.morestack on the fixture built for the VMs),
#     kernel stacks through the syscall entry, stack bounds and copies, the
#     walk over unwind tables 400 and 1,000 frames deep and through JIT
#     code, the cgroup filter, fork hooks, off-CPU waits and stack copies,
#     and sprof record --off-cpu (the off-CPU tests took 30-140 s a VM).
#   full (make kernel-matrix-full): all of ./bpf's tests and the end-to-end
#     ones.
chains='TestRecordCFramePointerChain|TestRecordNoFramePointerChain|TestRecordThreadChain|TestRecordPLTLeafChain|TestRecordKernelFrames|TestRecordPprofTop'
scope=${SPROF_MATRIX_SCOPE:-chains}
case $scope in
chains)
	bpf_tests='^(TestEveryPathLoads|TestOffCPUProgramLoads)$'
	sprof_tests="^($chains)\$"
	;;
kernel)
	bpf_tests='^(TestEveryPathLoads|TestOpenLoadsItsPathOnly|TestWalkChain|TestWalkLeafUnderIndirectCall|TestWalkPLTStubLeaf|TestWalkLeafThroughJumpStub|TestWalkLeafInCodeFault|TestWalkBadFrames|TestWalkOtherStack|TestWalkAboveCopiedTop|TestSampleInExecve|TestOffCPUInExecve|TestOffCPUThreadsExiting|TestWalkFollowsMorestack|TestKernelStacksAndPLTLeaf|TestStackCopy|TestStackCopyInSyscall|TestTableWalkDeep|TestTableWalkJIT|TestCgroupFilter|TestFollowForks|TestOffCPUWaits|TestOffCPUStackCopy|TestOffCPUProgramLoads)$'
	sprof_tests="^($chains|TestCheckAsRoot|TestCheckUnprivileged|TestRecordOffCPU)\$"
	;;
full)
	bpf_tests='.'
	sprof_tests="^($chains|TestRecordPidFilter|TestRecordOffCPU|TestCheckAsRoot|TestCheckUnprivileged)\$"
	;;
*) echo "kernel-matrix: SPROF_MATRIX_SCOPE is chains, kernel or full, not $scope" >&2 && exit 2 ;;
esac
# A VM of the chains scope took 126-201 s on a 2-core host with a load
# average of 23-40, 47-84 s of the emulator's CPU: the deadline is for a
# VM that hangs, not for a slow one.
case $scope in
chains) vm_timeout=${SPROF_MATRIX_VM_TIMEOUT:-420} ;;
*) vm_timeout=${SPROF_MATRIX_VM_TIMEOUT:-900} ;;
esac
boot_timeout=${SPROF_MATRIX_BOOT_TIMEOUT:-120}
# Each test binary runs under -test.timeout of two thirds of vm_timeout,
# after which Go prints where it hangs: a console silent for longer is a
# guest that no longer runs.
test_timeout=$((vm_timeout * 2 / 3))
silent_after=$((test_timeout + 30))
# To rerun some tests only: go test -run patterns for ./bpf and ./cmd/sprof.
bpf_tests=${SPROF_MATRIX_BPF_RUN:-$bpf_tests}
sprof_tests=${SPROF_MATRIX_SPROF_RUN:-$sprof_tests}

log() { echo "kernel-matrix: $*" >&2; }
die() { log "$*"; exit 1; }

# --- apt, confined to $cache/apt ------------------------------------------

aptdir=$cache/apt
aptopts="-q -o Dir::State=$aptdir -o Dir::State::Lists=$aptdir/lists -o Dir::State::status=$aptdir/status
 -o Dir::Cache=$aptdir -o Dir::Cache::pkgcache=pkgcache.bin -o Dir::Cache::srcpkgcache=srcpkgcache.bin
 -o Dir::Etc::SourceList=$aptdir/sources.list -o Dir::Etc::SourceParts=-
 -o Dir::Etc::Preferences=$aptdir/preferences -o Dir::Etc::PreferencesParts=$aptdir/preferences.d
 -o APT::Architecture=amd64 -o APT::Architectures=amd64,arm64 -o Acquire::Languages=none
 -o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false
 -o Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false
 -o Acquire::IndexTargets::deb::DEP-11-icons-hidpi::DefaultEnabled=false"
apt_updated=

# apt_update updates the lists once a run; it fails, once with apt's words,
# when any of them could not be fetched.
apt_update() {
	[ -n "$apt_updated" ] && return "$apt_updated"
	apt_updated=1
	mkdir -p "$aptdir/lists/partial" "$aptdir/archives/partial" "$aptdir/preferences.d"
	: >"$aptdir/status"
	: >"$aptdir/preferences"
	for suite in bullseye bookworm trixie sid; do
		echo "deb [arch=amd64,arm64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $suite main"
	done >"$aptdir/sources.list"
	log "apt-get update (bullseye bookworm trixie sid, amd64 arm64)"
	# shellcheck disable=SC2086
	if ! apt-get $aptopts --error-on=any update >"$out/apt-update.log" 2>&1; then
		grep -v '^Ign:' "$out/apt-update.log" >&2
		log "apt-get update failed"
		return 1
	fi
	apt_updated=0
}

# stale FILE WHAT says, when FILE exists but could not be refreshed, that
# the cached WHAT is used as it is: a week-old cache must not fail a run
# without network. Without FILE, WHAT is unavailable.
stale() {
	[ -e "$1" ] || unavailable "$2"
	log "$2: using the cached copy from $(date -r "$1" +%F) (no network to refresh it)"
}

# unavailable WHAT ends the matrix for want of WHAT, which could not be
# downloaded and is not cached: under CI=true it fails, naming it; on a
# developer's machine without network it is skipped with the reason, as
# the kernel tests are without root. apt's own words are above it.
unavailable() {
	[ "${CI:-}" = true ] && die "CI=true and $1 could not be downloaded from deb.debian.org, nor is it cached in $cache"
	log "skipped: $1 could not be downloaded from deb.debian.org, nor is it cached in $cache"
	exit 0
}

# newest_kernel SUITE ARCH prints "package version" of the package that
# holds the suite's newest generic kernel image: linux-image-*-unsigned up
# to trixie; since sid's 7.x, linux-binary-* (linux-image-* is signed and,
# in sid, only depends on it).
newest_kernel() {
	for f in "$aptdir"/lists/*_dists_"$1"_main_binary-"$2"_Packages*; do
		/usr/lib/apt/apt-helper cat-file "$f"
	done | awk -v arch="$2" '
		/^Package: / { p = $2 }
		/^Version: / && p ~ ("^linux-(image|binary)-[0-9][.0-9]*(-[0-9]+)?(\\+deb[0-9]+)?-" arch "(-unsigned)?$") {
			rank = p ~ /-unsigned$/ ? 2 : p ~ /^linux-binary-/ ? 1 : 0
			print $2, rank, p
		}' | sort -V | tail -n 1 | awk '{ print $3, $1 }'
}

# fetch_deb DIR PKG... downloads packages (PKG:ARCH=VERSION or
# PKG:ARCH/SUITE) into DIR, in one apt-get run: each run reads the lists of
# four suites, which takes a while on a loaded machine. On failure it
# prints apt's log and returns 1.
fetch_deb() {
	dir=$1
	shift
	(cd "$dir" && rm -f ./*.deb &&
		# shellcheck disable=SC2086
		apt-get $aptopts download "$@" >"$out/apt-download.log" 2>&1) ||
		{ cat "$out/apt-download.log" >&2; log "apt-get download $* failed"; return 1; }
}

# fresh FILE says whether FILE exists and was written less than a week ago.
fresh() { [ -e "$1" ] && [ -z "$(find "$1" -mtime +7)" ]; }

# fetch_kernel SUITE ARCH leaves $cache/kernels/SUITE-ARCH/{vmlinuz,release}.
fetch_kernel() {
	d=$cache/kernels/$1-$2
	[ -s "$d/vmlinuz" ] && fresh "$d/release" && return
	apt_update || { stale "$d/vmlinuz" "$1/$2's kernel" && return; }
	set -- "$1" "$2" $(newest_kernel "$1" "$2")
	[ $# -eq 4 ] || die "no linux-image for $2 in $1"
	# The week-old kernel is still the suite's newest: keep it.
	if [ -s "$d/vmlinuz" ] && [ "$(cat "$d/release")" = "$3 $4" ]; then
		touch "$d/release"
		return
	fi
	log "$1/$2: apt-get download $3 ($4)"
	mkdir -p "$d/deb"
	fetch_deb "$d/deb" "$3:$2=$4" || { stale "$d/vmlinuz" "$1/$2's kernel ($3 $4)" && return; }
	# /boot/vmlinuz-VERSION, or /usr/lib/modules/VERSION/vmlinuz (sid),
	# in one pass over the package (its modules make it hundreds of MB to
	# decompress); tar's status says a pattern matched nothing, which one
	# always does.
	dpkg-deb --fsys-tarfile "$d"/deb/*.deb |
		tar -x -C "$d/deb" --wildcards './boot/vmlinuz-*' './usr/lib/modules/*/vmlinuz' 2>/dev/null || true
	img=$(find "$d/deb/boot" "$d/deb/usr/lib/modules" -name 'vmlinuz*' -type f 2>/dev/null | head -n 1)
	[ -n "$img" ] || die "$3 holds no vmlinuz"
	mv "$img" "$d/vmlinuz"
	echo "$3 $4" >"$d/release"
	rm -rf "$d/deb"
}

# fetch_tools ARCH leaves bookworm's static busybox, and setpriv (which
# bpf's capability tests run; busybox's lacks their options) with the
# libcap-ng it links, in $cache/tools/ARCH.
fetch_tools() {
	d=$cache/tools/$1
	fresh "$d/stamp" && return
	apt_update || { stale "$d/stamp" "busybox for $1" && return; }
	n=$d.new
	rm -rf "$n" && mkdir -p "$n/deb"
	log "$1: apt-get download busybox-static util-linux libcap-ng0 (bookworm)"
	fetch_deb "$n/deb" "busybox-static:$1/bookworm" "util-linux:$1/bookworm" "libcap-ng0:$1/bookworm" ||
		{ stale "$d/stamp" "busybox for $1" && return; }
	for deb in "$n"/deb/*.deb; do
		dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$n" --wildcards ./bin/busybox ./usr/bin/setpriv './lib/*/libcap-ng.so.0*' 2>/dev/null || true
	done
	rm -rf "$n/deb"
	for f in bin/busybox usr/bin/setpriv; do
		[ -x "$n/$f" ] || die "no $f in bookworm's packages for $1"
	done
	touch "$n/stamp"
	rm -rf "$d" && mv "$n" "$d"
}

# --- initramfs -----------------------------------------------------------

# build_pprof ARCH FILE builds the pprof command, the oracle of the pprof
# output tests where there is no go tool, at the version sprof's go.mod
# requires. Its main package needs a module of its own: sprof's go.sum
# lacks the line-editing library only the command uses.
build_pprof() {
	v=$(cd "$root" && $go list -m -f '{{.Version}}' github.com/google/pprof)
	m=$out/pprof-$v
	if [ ! -f "$m/go.sum" ]; then
		rm -rf "$m" && mkdir -p "$m"
		(cd "$m" && $go mod init sprof-matrix/pprof >/dev/null 2>&1 && $go get "github.com/google/pprof@$v" >/dev/null 2>&1) ||
			die "go get github.com/google/pprof@$v failed"
	fi
	(cd "$m" && CGO_ENABLED=0 GOARCH=$1 $go build -ldflags='-s -w' -o "$2" github.com/google/pprof)
}

# build_initrd ARCH writes $out/initrd-ARCH.cpio, an uncompressed
# initramfs (the guest would spend seconds of emulated time inflating it).
# go caches the test binaries it builds; the image is packed again only
# when what goes in it changed.
build_initrd() {
	arch=$1
	t=$out/root-$arch
	rm -rf "$t"
	mkdir -p "$t/proc" "$t/sys" "$t/dev" "$t/tmp" "$t/sprof/bpf" "$t/sprof/cmd/sprof" "$t/sprof/testdata"
	cp -a "$cache/tools/$arch/." "$t/"
	rm "$t/stamp"
	# Without DWARF (-w): the tests profile fixtures, not themselves, but
	# `sprof record -- CMD` launches CMD through its own binary (the test
	# binary here), whose few samples before the exec had sprof convert
	# the test binary's DWARF, 8-10 s of an emulated VM's time; and a
	# smaller initramfs boots sooner.
	log "$arch: go test -c ./bpf ./cmd/sprof"
	(cd "$root" && CGO_ENABLED=0 GOARCH=$arch $go test -c -ldflags=-w -o "$t/sprof/bpf/bpf.test" ./bpf)
	(cd "$root" && CGO_ENABLED=0 GOARCH=$arch $go test -c -ldflags=-w -o "$t/sprof/cmd/sprof/sprof.test" ./cmd/sprof)
	build_pprof "$arch" "$t/bin/pprof"
	# The Go fixture the tests of the walk through runtime.morestack build
	# with the toolchain where there is one (SPROF_GOSTACK in the VM).
	(cd "$root" && CGO_ENABLED=0 GOARCH=$arch $go build -o "$t/sprof/gostack" ./testdata/e2e/gostack)
	for d in bpf e2e unwind; do
		cp -r "$root/testdata/$d" "$t/sprof/testdata/"
	done
	# The C library and dynamic loader of the fixtures (Debian 12's).
	case $arch in
	amd64)
		mkdir -p "$t/lib64"
		cp -L /lib64/ld-linux-x86-64.so.2 "$t/lib64/"
		cp -L /lib/x86_64-linux-gnu/libc.so.6 "$t/lib/x86_64-linux-gnu/"
		;;
	arm64)
		cp -L /usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1 "$t/lib/"
		cp -L /usr/aarch64-linux-gnu/lib/libc.so.6 "$t/lib/aarch64-linux-gnu/"
		;;
	esac
	# Each test binary's -test.timeout lets Go print where a test hangs
	# before the VM's time is up. The console's first line may follow the
	# firmware's terminal escapes: the markers start on a line of their own.
	cat >"$t/init" <<EOF
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/usr/bin:/bin HOME=/tmp TMPDIR=/tmp CI=true SPROF_EMULATED_CPU=tcg SPROF_GOSTACK=/sprof/gostack
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t debugfs debugfs /sys/kernel/debug
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
mount -t bpf bpf /sys/fs/bpf
mount -t cgroup2 cgroup2 /sys/fs/cgroup
# The tracepoints sprof's programs attach to keep two probes from here
# (ftrace's events, in two trace instances, recording nothing), so that
# attaching and detaching programs patches no kernel code: multi-threaded
# TCG can run a stale copy of code another vCPU patches, and amd64 guests
# oopsed or hung in __schedule and trace_syscall_exit as tests turned
# those tracepoints on and off. A tracepoint's first probe turns its
# static key on, and since 5.10 its static call goes to the probe alone
# while it is the only one, to the loop over probes from the second on.
mkdir /sys/kernel/tracing/instances/keep
for t in /sys/kernel/tracing /sys/kernel/tracing/instances/keep; do
	echo 0 >\$t/tracing_on
	for e in sched/sched_switch sched/sched_process_fork sched/sched_process_exit raw_syscalls/sys_exit; do
		echo 1 >\$t/events/\$e/enable
	done
done
echo
echo "@@@ init \$(cut -d' ' -f1 /proc/uptime)"
echo "@@@ kernel \$(uname -r) \$(uname -m) \$(nproc) CPUs, perf_event_paranoid \$(cat /proc/sys/kernel/perf_event_paranoid)"
echo "@@@ _text \$(grep -m 1 ' _text\$' /proc/kallsyms | cut -d' ' -f1)"
run() { # suite dir binary pattern
	cd /sprof/\$2
	echo "@@@ begin \$1"
	./\$3 -test.v -test.count=1 -test.timeout=${test_timeout}s -test.run "\$4" </dev/null 2>&1
	echo "@@@ end \$1 rc=\$?"
}
run bpf bpf bpf.test '$bpf_tests'
run sprof cmd/sprof sprof.test '$sprof_tests'
echo "@@@ done"
poweroff -f
EOF
	chmod +x "$t/init"
	sum=$(cd "$t" && find . -type f -exec sha256sum {} + | LC_ALL=C sort -k2 | sha256sum)
	if [ -s "$out/initrd-$arch.cpio" ] && [ "$(cat "$out/initrd-$arch.sum" 2>/dev/null)" = "$sum" ]; then
		return
	fi
	log "$arch: packing the initramfs"
	rm -f "$out/initrd-$arch.sum"
	(cd "$t" && find . | LC_ALL=C sort | cpio -o -H newc --quiet) >"$out/initrd-$arch.cpio"
	echo "$sum" >"$out/initrd-$arch.sum"
}

# --- VMs -----------------------------------------------------------------

# What a kernel prints when it stalls.
stall_lines='BUG: soft lockup|rcu: INFO: rcu_[a-z]+ (self-)?detected stall'

# settle PID SECONDS waits at most SECONDS for the emulator PID to exit
# (a zombie until waited for): a stalled kernel's panic, printing the
# stuck CPU's stack, then powering off.
settle() {
	for _ in $(seq $(($2 * 2))); do
		st=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null) || return 0
		[ -z "$st" ] || [ "$st" = Z ] && return 0
		sleep 0.5
	done
}

# boot SUITE ARCH ACCEL boots the kernel with its arch's initramfs under
# -accel ACCEL and writes the serial console to $out/SUITE-ARCH.log. It
# sets ended to how the VM ended: "off" (it powered off: /init ran to its
# end, or the kernel panicked), "timeout" (it ran for vm_timeout seconds)
# "boot-timeout" (no /init after boot_timeout seconds), "stall" (the
# kernel reported a soft lockup or an RCU stall), "int3" (the kernel
# oopsed on a breakpoint of its own text patching) or "silent" (nothing on
# the console for silent_after seconds after /init: then where its
# virtual CPUs were goes into the failure's reason, see vcpu_state, and
# on amd64 an NMI has the kernel print the stack it interrupts), and
# cpu to the emulator's CPU seconds (user and system), which on a loaded
# host say more than the wall time. No network device: nothing needs one,
# and on q35 it would bring the firmware's network boot ROM.
boot() {
	vmlinuz=$cache/kernels/$1-$2/vmlinuz
	raw=$out/$1-$2.raw
	mon=$out/$1-$2.mon
	rm -f "$mon.in" "$mon.out" "$out/$1-$2.vcpus"
	mkfifo "$mon.in" "$mon.out"
	case $2 in
	amd64) set -- "$1" "$2" "$3" qemu-system-x86_64 -M q35 -cpu max "console=ttyS0 unknown_nmi_panic=1" ;;
	arm64) set -- "$1" "$2" "$3" qemu-system-aarch64 -M virt -cpu max,pauth-impdef=on console=ttyAMA0 ;;
	esac
	"$4" -accel "$3" "$5" "$6" "$7" "$8" -m 1536 -smp 2 -nographic -no-reboot -nic none -monitor "pipe:$mon" \
		-kernel "$vmlinuz" -initrd "$out/initrd-$2.cpio" -append "$9 panic=-1 softlockup_panic=1 softlockup_all_cpu_backtrace=1 quiet" \
		</dev/null >"$raw" 2>&1 &
	qemu=$!
	t0=$(date +%s)
	ended=off
	cpu=0
	size=0
	heard=$t0
	# Until the emulator exits (a zombie until waited for) or runs out of
	# time; the last reading of its CPU time is within half a second of its
	# end.
	while stat=$(cat "/proc/$qemu/stat" 2>/dev/null) && [ -n "$stat" ]; do
		cpu=$(echo "$stat" | awk '{ printf "%d", ($14 + $15) / 100 }')
		[ "$(echo "$stat" | awk '{ print $3 }')" = Z ] && break
		now=$(date +%s)
		elapsed=$((now - t0))
		if [ "$(stat -c %s "$raw")" != "$size" ]; then
			size=$(stat -c %s "$raw")
			heard=$now
		fi
		if [ "$elapsed" -ge "$vm_timeout" ]; then
			ended=timeout
		elif [ "$elapsed" -ge "$boot_timeout" ] && ! grep -q '@@@ init' "$raw"; then
			ended=boot-timeout
		elif grep -a -q -E "$stall_lines" "$raw"; then
			ended=stall
			settle "$qemu" 10
		elif grep -a -q 'Oops: int3' "$raw"; then
			ended=int3
		elif [ $((now - heard)) -ge "$silent_after" ] && grep -q '@@@ init' "$raw"; then
			ended=silent
			vcpu_state "$mon" >"$out/$1-$2.vcpus"
			# amd64: the kernel panics on the NMI (unknown_nmi_panic),
			# printing the stack it interrupted, with names.
			printf 'nmi\n' >"$mon.in"
			settle "$qemu" 10
		else
			sleep 0.5
			continue
		fi
		kill "$qemu" 2>/dev/null || true
		break
	done
	wait "$qemu" || true
	tr -d '\r' <"$raw" >"$out/$1-$2.log"
	rm -f "$raw" "$mon.in" "$mon.out"
	# The oops may have ended the kernel (a second oops in the interrupt
	# handler panics it) before the loop above saw it, and so may a stall
	# (softlockup_panic).
	if [ "$ended" = off ] && grep -a -q 'Oops: int3' "$out/$1-$2.log"; then
		ended=int3
	elif [ "$ended" = off ] && grep -a -q -E "$stall_lines" "$out/$1-$2.log"; then
		ended=stall
	fi
}

# vcpu_state MON prints where a silent guest's virtual CPUs are, asked of
# its emulator's monitor (the pipes MON.in and MON.out): for each, its
# instruction pointer, its privilege level and whether it is halted
# (idle). A guest looping in its own kernel with interrupts off (a lockup
# the watchdogs cannot report, since they run on interrupts) is so told
# from an emulator that stopped running it, which does not answer: then
# it prints that. Debian's kernels place themselves at random (KASLR):
# the kernel's _text at that boot, which /init prints, and the
# System.map of its -dbg package name the functions (on amd64 the NMI's
# panic names those of one CPU).
vcpu_state() {
	printf 'info registers -a\n' >"$1.in"
	timeout 5 cat "$1.out" | tr -d '\r' |
		grep -a -o -E 'CPU#[0-9]+|(RIP|EIP|PC)=[0-9a-f]+|CPL=[0-3]|HLT=[01]|EL[0-3][th]' | tr '\n' ' ' |
		awk '{ print } END { if (NR == 0) print "the emulator did not answer its monitor in 5 s" }'
}

# boot_failure LOG prints why a VM failed by no fault of a test: the
# kernel's first panic, oops or BUG line, else what ended it.
boot_failure() {
	why=$(grep -a -m 1 -E 'Kernel panic|Oops|BUG:|general protection fault' "$1" | cut -c1-200)
	case $ended in
	boot-timeout) why="no /init after $boot_timeout s${why:+; $why}" ;;
	timeout) why="no test started in $vm_timeout s${why:+; $why}" ;;
	stall) why="the kernel stalled: $(grep -a -m 1 -E 'BUG: soft lockup|detected stall' "$1" | cut -c1-160)" ;;
	silent) why="the guest went silent for $silent_after s, after: $(grep -a -v -e '^ *$' -e '^qemu-system' "$1" | tail -n 1 | cut -c1-160); its vCPUs: $(cat "${1%.log}.vcpus" 2>/dev/null)" ;;
	int3) why="the kernel hit a breakpoint of its own text patching: $(grep -a -m 1 -A 3 'Oops: int3' "$1" | grep -a -m 1 'RIP:' | sed 's/^\[[^]]*\] *//' | cut -c1-160)" ;;
	*) why=${why:-"the emulator exited before /init started any test"} ;;
	esac
	echo "$why"
}

# --- results -------------------------------------------------------------

# table prints one row per test (bpf/TestX, sprof/TestX) and one column per
# kernel from the serial logs: ok, FAIL or skip with the test's seconds, "-"
# where the test did not run, "?" where it started and never ended (the VM
# crashed or timed out); then each VM's time to /init, wall time and
# emulator CPU time, whether it was booted twice, the first messages of
# each failure and the kernels whose VM never reported, and exits 1 if
# anything failed.
table() {
	status=0
	for k in $matrix; do
		echo "@@@ column $k $(cut -d' ' -f2 "$cache/kernels/${k%/*}-${k#*/}/release" 2>/dev/null || echo '?')"
		[ -f "$out/${k%/*}-${k#*/}.retry" ] && echo "@@@ retried $(cat "$out/${k%/*}-${k#*/}.retry")"
		cat "$out/${k%/*}-${k#*/}.log" 2>/dev/null || true
	done | awk -v walls="$out/walls" -v vm_timeout="$vm_timeout" -v boot_timeout="$boot_timeout" -v silent_after="$silent_after" '
	function msgline(m) { return m == "" ? "" : "\n      " m }
	function cell(t, c) { return (t SUBSEP c) in res ? res[t, c] : ((t SUBSEP c) in ran ? "?" : "-") }
	function failed_cell(t, c) { return cell(t, c) ~ /^(FAIL|\?)/ }
	function row(name, v,   c) {
		printf "%-44s", name
		for (c = 1; c <= ncol; c++) printf " %10s", (c in v) ? v[c] : "-"
		printf "\n"
	}
	/^@@@ column / {
		col = ++ncol; split($3, ka, "/"); arch[col] = ka[2]; ver[col] = $4; sub(/-[^-]*$/, "", ver[col])
		key[col] = $3; suite = ""; test = ""; next
	}
	/^@@@ retried / { m = $0; sub(/^@@@ retried /, "", m); retry[col] = m; next }
	/@@@ init / { boot[col] = sprintf("%.1f", $NF); next }
	/^@@@ begin / { suite = $3; next }
	/^@@@ end / { suite = ""; next }
	/^@@@ done/ { done[col] = 1; next }
	suite != "" && /^=== (RUN|CONT|PAUSE) / {
		split($3, tp, "/"); test = suite "/" tp[1]
		if (!(test in seen)) { seen[test] = 1; order[++ntest] = test }
		ran[test, col] = 1; last[col] = test; next
	}
	suite != "" && /^--- (PASS|FAIL|SKIP): / {
		test = suite "/" $3
		if (!(test in seen)) { seen[test] = 1; order[++ntest] = test }
		secs = $4; gsub(/[()s]/, "", secs)
		res[test, col] = ($2 == "PASS:" ? "ok" : $2 == "FAIL:" ? "FAIL" : "skip") sprintf(" %.1f", secs)
		if ($2 == "FAIL:") failed = 1
		next
	}
	suite != "" && test != "" && /^    +[^ ]/ {
		m = $0; sub(/^ +/, "", m)
		last3[test, col] = last2[test, col]; last2[test, col] = last1[test, col]; last1[test, col] = substr(m, 1, 240)
	}
	# The first failure of a sampler to open, by a bpf test (Open: ...) or
	# by sprof record: why nothing else ran on this kernel.
	/^ +[^ ]+_test\.go:[0-9]+: Open: / && !(col in loaderr) { m = $0; sub(/^ +[^ ]+: Open: /, "", m); loaderr[col] = substr(m, 1, 400) }
	/^(panic:|Kernel panic|---\[ end Kernel panic)|Oops|BUG:/ { crash[col] = crash[col] "\n      " substr($0, 1, 200) }
	END {
		while ((getline line < walls) > 0) {
			split(line, w, " "); k = w[1] "/" w[2]
			wall[k] = w[3]; ended[k] = w[5]; cpu[k] = w[6]
		}
		printf "\n%-44s", "kernel matrix (QEMU TCG; seconds)"
		for (c = 1; c <= ncol; c++) printf " %10s", arch[c]
		printf "\n%-44s", ""
		for (c = 1; c <= ncol; c++) printf " %10s", ver[c]
		printf "\n"
		for (i = 1; i <= ntest; i++) {
			printf "%-44s", substr(order[i], 1, 44)
			for (c = 1; c <= ncol; c++) printf " %10s", cell(order[i], c)
			printf "\n"
		}
		for (c = 1; c <= ncol; c++) {
			if (key[c] in wall) { vw[c] = wall[key[c]]; vc[c] = cpu[key[c]] }
			if (c in retry) { vr[c] = "yes"; nretry++ }
		}
		row("boot to /init", boot)
		row("VM wall time", vw)
		row("emulator CPU time", vc)
		if (nretry) row("booted twice (emulator fault)", vr)
		for (c = 1; c <= ncol; c++) {
			if (c in retry) printf "\n%s %s: booted twice, the second time with one emulator thread; the first boot failed: %s\n", arch[c], ver[c], retry[c]
			if (!done[c]) {
				failed = 1
				e = ended[key[c]]
				if (e == "timeout") why = "timed out after " vm_timeout " s (SPROF_MATRIX_VM_TIMEOUT)" (c in last ? ", in " last[c] : "")
				else if (e == "silent") why = "its console went silent for " silent_after " s" (c in last ? ", in " last[c] : "")
				else if (e == "boot-timeout") why = "did not reach /init in " boot_timeout " s (SPROF_MATRIX_BOOT_TIMEOUT)"
				else if (crash[c] != "") why = "the kernel or a test binary crashed" (c in last ? ", in " last[c] : "")
				else why = "stopped before its end" (c in last ? ", in " last[c] : "")
				printf "\n%s %s: the VM did not finish: %s; see its log%s\n", arch[c], ver[c], why, crash[c]
			}
			if (c in loaderr) {
				# One cause, said once, rather than every test it failed.
				printf "\n%s %s: the sampler does not load: %s\n      failed:", arch[c], ver[c], loaderr[c]
				for (i = 1; i <= ntest; i++)
					if (failed_cell(order[i], c))
						printf " %s", order[i]
				printf "\n"
				continue
			}
			for (i = 1; i <= ntest; i++)
				if (failed_cell(order[i], c))
					printf "\n%s %s %s:%s%s%s\n", arch[c], ver[c], order[i], msgline(last3[order[i], c]), msgline(last2[order[i], c]), msgline(last1[order[i], c])
		}
		exit failed
	}' || status=$?
	echo "serial logs: $out/*.log"
	return $status
}

# --- main ----------------------------------------------------------------

if [ "${1:-}" = table ]; then
	table
	exit
fi

if [ "${1:-}" = fetch-background ]; then
	# make test's first step: the downloads (network, little CPU) run
	# while the unit tests do; the matrix's own run, at the end, waits for
	# them (the cache's lock) and says what failed, if anything did.
	[ "$(id -u)" -eq 0 ] || exit 0
	mkdir -p "$out"
	log "fetching the kernels in the background (log: $out/fetch.out)"
	# At the lowest priorities: the unit tests running meanwhile measure
	# waits and time, and a package's decompression competes with them.
	nice -n 19 ionice -c 2 -n 7 "$0" fetch </dev/null >"$out/fetch.out" 2>&1 &
	exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
	# Like the tests that need root: skip on a developer's machine, fail in CI.
	[ "${CI:-}" = true ] && die "CI=true but not root: the matrix needs root (apt-get into $cache)"
	log "skipped: needs root (apt-get into $cache)"
	exit 0
fi
# What the matrix runs, as install-test-deps.sh installs it: without one
# of them it is skipped with the reason on a developer's machine, and
# fails under CI=true.
missing=
tools="apt-get dpkg-deb cpio sha256sum flock $go"
case $matrix in *amd64*) tools="$tools qemu-system-x86_64" ;; esac
case $matrix in *arm64*) tools="$tools qemu-system-aarch64" ;; esac
for tool in $tools; do
	command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"
done
[ -e /usr/share/keyrings/debian-archive-keyring.gpg ] || missing="$missing debian-archive-keyring"
case $matrix in *arm64*) [ -e /usr/aarch64-linux-gnu/lib/libc.so.6 ] || missing="$missing libc6-arm64-cross" ;; esac
if [ -n "$missing" ]; then
	[ "${CI:-}" = true ] && die "CI=true and missing:$missing (scripts/install-test-deps.sh installs them)"
	log "skipped: missing$missing (scripts/install-test-deps.sh installs them)"
	exit 0
fi
mkdir -p "$out" "$cache"
start=$(date +%s)
[ "${1:-}" = fetch ] || rm -f "$out/walls" "$out"/*.log "$out"/*.retry "$out"/*.raw "$out"/initrd-*.gz
# One fetch at a time in the cache: make test's background one, or another
# run's.
exec 9>"$cache/lock"
flock 9
arches=
for k in $matrix; do
	case $k in
	bullseye/* | bookworm/* | trixie/* | sid/*) ;;
	*) die "unknown kernel $k: want SUITE/ARCH with SUITE bullseye, bookworm, trixie or sid" ;;
	esac
	case $k in
	*/amd64 | */arm64) ;;
	*) die "unknown arch in $k: want amd64 or arm64" ;;
	esac
	fetch_kernel "${k%/*}" "${k#*/}"
	case " $arches " in *" ${k#*/} "*) ;; *) arches="$arches ${k#*/}" ;; esac
done
for a in $arches; do
	fetch_tools "$a"
done
exec 9>&-
if [ "${1:-}" = fetch ]; then
	log "fetched in $(($(date +%s) - start)) s: kernels and tools in $cache"
	exit 0
fi
for a in $arches; do
	build_initrd "$a"
done
if [ "${1:-}" = prepare ]; then
	log "ready in $(($(date +%s) - start)) s: kernels in $cache, initramfs images in $out"
	exit 0
fi
log "ready in $(($(date +%s) - start)) s; booting $(echo "$matrix" | wc -w) kernels one at a time"

for k in $matrix; do
	suite=${k%/*} arch=${k#*/}
	s=$(date +%s)
	boot "$suite" "$arch" tcg
	retried=0
	if [ "$ended" = stall ] || [ "$ended" = int3 ] || [ "$ended" = silent ] || ! grep -q '^@@@ begin' "$out/$suite-$arch.log"; then
		# The emulator failed: once more, in one thread.
		why=$(boot_failure "$out/$suite-$arch.log")
		mv "$out/$suite-$arch.log" "$out/$suite-$arch.boot1.log"
		echo "$why (first boot's log: $out/$suite-$arch.boot1.log)" >"$out/$suite-$arch.retry"
		log "$k: the VM failed ($why); booting it once more with one emulator thread"
		boot "$suite" "$arch" tcg,thread=single
		retried=1
	fi
	wall=$(($(date +%s) - s))
	echo "$suite $arch $wall $(cut -d' ' -f2 "$cache/kernels/$suite-$arch/release") $ended $cpu $retried" >>"$out/walls"
	log "$k: $wall s, emulator CPU $cpu s, load average $(cut -d' ' -f1 /proc/loadavg)"
done

table || status=$?
log "matrix wall time $(($(date +%s) - start)) s (load average $(cut -d' ' -f1-3 /proc/loadavg))"
exit "${status:-0}"
