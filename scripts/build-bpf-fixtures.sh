#!/bin/sh
# Rebuilds the fixtures of bpf/'s tests (testdata/bpf/). Needs gcc for
# x86-64 (Debian 12's gcc 12). The binaries are committed so the tests need
# no compiler; rerun this after editing testdata/bpf/*.c.
set -eu
cd "$(dirname "$0")/../testdata/bpf"
gcc -O2 -fno-omit-frame-pointer -no-pie -o fpwalk fpwalk.c
gcc -O2 -fomit-frame-pointer -fno-stack-protector -no-pie -pthread -o nofp nofp.c
gcc -O2 -fno-omit-frame-pointer -no-pie -o pltleaf pltleaf.c
mkdir -p arm64
aarch64-linux-gnu-gcc -O2 -fno-omit-frame-pointer -no-pie -o arm64/pltleaf pltleaf.c
gcc -O2 -fno-omit-frame-pointer -no-pie -o stackswitch stackswitch.c
aarch64-linux-gnu-gcc -O2 -fno-omit-frame-pointer -no-pie -o arm64/stackswitch stackswitch.c
