#!/bin/sh
# Rebuilds testdata/agent/inlspin with Debian 12's gcc: -O2 inlines step
# and mix into spin, -g describes those inline levels in DWARF, and frame
# pointers let the agent's sampler unwind through spin to main.
set -eu
cd "$(dirname "$0")/../testdata/agent"
gcc -O2 -g -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer \
	-fdebug-prefix-map="$PWD"=/src -o inlspin inlspin.c
