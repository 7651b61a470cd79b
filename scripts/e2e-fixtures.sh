#!/bin/sh
# Rebuilds the end-to-end fixtures under testdata/e2e with Debian 12's gcc,
# and their aarch64 builds under testdata/e2e/arm64 with its cross compiler
# (gcc-aarch64-linux-gnu, libc6-dev-arm64-cross; the kernel matrix's arm64
# VMs run them). Frame pointers are kept everywhere, leaf functions
# included, and sibling calls are not turned into jumps, so every function
# of the chain has a frame of its own — what sprof's frame-pointer walker
# must then report exactly. plt is built -fno-builtin so that its labs stays
# a call through the PLT.
set -eu
cd "$(dirname "$0")/../testdata/e2e"
CFLAGS="-O2 -g -ffile-prefix-map=$PWD=. -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer -fno-optimize-sibling-calls"
for p in spin shortlived syscalls plt; do
	extra=
	[ "$p" = plt ] && extra=-fno-builtin
	gcc $CFLAGS $extra -o "$p" "$p.c"
	[ "$p" = shortlived ] || aarch64-linux-gnu-gcc $CFLAGS $extra -o "arm64/$p" "$p.c"
done
# The Go fixture is built by the tests themselves from gospin/main.go.
