#!/bin/sh
# Rebuilds the collector's fixture under testdata/collector with Debian 12's
# gcc: a PIE with a GNU build ID (gcc's default) that lives about 100 ms.
set -eu
cd "$(dirname "$0")/../testdata/collector"
gcc -O2 -g -fno-omit-frame-pointer -Wl,--build-id -o shortlived shortlived.c
