#!/bin/sh
# Rebuilds the end-to-end fixtures under testdata/e2e with Debian 12's gcc.
# Frame pointers are kept everywhere, leaf functions included, and sibling
# calls are not turned into jumps, so every function of the chain has a frame
# of its own — what sprof's frame-pointer walker must then report exactly.
set -eu
cd "$(dirname "$0")/../testdata/e2e"
CFLAGS="-O2 -g -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer -fno-optimize-sibling-calls"
for p in spin shortlived syscalls; do
	gcc $CFLAGS -o "$p" "$p.c"
done
# The Go fixture is built by the tests themselves from gospin/main.go.
