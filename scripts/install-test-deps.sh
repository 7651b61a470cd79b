#!/bin/sh
# Installs the Debian packages sprof's tests use as oracles or tools, and
# only those that are missing, so a second `make test` costs nothing.
#   clang-22, llvm-22  rebuild the BPF objects to check the committed ones;
#                      llvm-gsymutil and llvm-dwarfdump are GSYM/DWARF oracles
#   lld-22             links the cgo PIE whose Go module record only the
#                      loader's relocations fill (elfx.GoText's tests)
#   binutils           readelf --sframe, the SFrame oracle; nm and addr2line for symbolize
#   binutils-aarch64-linux-gnu  addr2line for symbolize's aarch64 fixture
#   linux-perf         perf, the oracle for stack-unwinding accuracy
#   debuginfod         a real debuginfod server for the client tests
#   chromium           renders flame-graph SVGs headless for the screenshot test
#   libc6-dbg          libc's separate debug file: symbolize's largest oracle test
#   libbpf-dev         the BPF helper headers make check-generate compiles with
#   python3-prometheus-client  Prometheus's text-format parser, for the agent's metrics
#   libc6-arm64-cross  the aarch64 libc the CFI interpreter is checked against readelf on
#   systemd            systemd-analyze verify, for the agent's unit file
#   util-linux         setpriv, to rerun BPF tests with fewer capabilities
#   gcc, gcc-aarch64-linux-gnu  compile the object files the GSYM converter's relocation test reads
#   libc6-dev-arm64-cross  the aarch64 C headers those compiles include; gcc-aarch64-linux-gnu only
#                      recommends it, and recommends are not installed (scripts/fresh-check.sh found it)
#   qemu-user          qemu-aarch64 runs the aarch64 SFrame fixtures for live stack dumps
#   bpftool            libbpf's kernel feature probe, the oracle for bpf.ProbeFeatures and sprof check
#   sudo               the README's quick start runs as a sudo user too
#   nodejs             a real JIT: its perf map (--perf-basic-prof) and jitdump (--perf-prof)
#                      name the JavaScript frames of the JIT tests
#   openjdk-17-jdk-headless  the JVM and jcmd, whose Compiler.perfmap names the Java frames
#   python3.11, python3.11-dbg  Debian's CPython, whose frames the Python tests profile, and its
#                      DWARF, the oracle for symbolize/cpython's table of structure offsets
#   file               tells the tests whether a binary is static (sprof version, the quick start);
#                      minimal Debian roots lack it (scripts/fresh-check.sh found it)
#   qemu-system-x86, qemu-system-arm, cpio  boot the kernel matrix's VMs
#                      (scripts/kernel-matrix.sh) from an initramfs; its arm64
#                      VMs take their libc from libc6-arm64-cross
#   debian-archive-keyring  verifies the Debian suites the matrix's kernels come from
#   golang-1.19-go     builds the programs whose Go function tables have Go 1.18's
#                      layout (symbolize/goinline, internal/elfx)
set -eu

want="clang-22 llvm-22 lld-22 binutils binutils-aarch64-linux-gnu libc6-arm64-cross linux-perf debuginfod chromium libbpf-dev libc6-dbg python3-prometheus-client systemd util-linux gcc gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user bpftool sudo nodejs openjdk-17-jdk-headless python3.11 python3.11-dbg qemu-system-x86 qemu-system-arm cpio debian-archive-keyring file golang-1.19-go"
missing=""
for p in $want; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
	echo "install-test-deps: missing packages:$missing; run as root or install them with apt-get" >&2
	exit 1
fi
echo "install-test-deps: installing$missing"
apt-get update -q
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing
