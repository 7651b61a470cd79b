#!/bin/sh
# Rebuilds the unwinding fixtures under testdata/unwind with Debian 12's gcc
# 12 and binutils 2.40: the same program built -O2 -fomit-frame-pointer, once
# with a .sframe section (gas --gsframe writes SFrame v1) and once with
# .eh_frame only. Both are PIEs with a GNU build ID and keep their symbols.
# arm64/spin-ehframe is the .eh_frame build for aarch64 (gcc-aarch64-linux-gnu,
# libc6-dev-arm64-cross), which the kernel matrix's arm64 VMs profile.
set -eu
cd "$(dirname "$0")/../testdata/unwind"
flags="-O2 -fomit-frame-pointer -fasynchronous-unwind-tables -Wl,--build-id"
gcc $flags -Wa,--gsframe -o spin-sframe spin.c
gcc $flags -o spin-ehframe spin.c
mkdir -p arm64
aarch64-linux-gnu-gcc $flags -o arm64/spin-ehframe spin.c
