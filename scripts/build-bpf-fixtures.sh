#!/bin/sh
# Rebuilds the fixtures of bpf/'s tests: testdata/bpf/ for x86-64 with
# Debian 12's gcc 12, testdata/bpf/arm64/ for aarch64 with its cross
# compiler (gcc-aarch64-linux-gnu, libc6-dev-arm64-cross), both linked
# against glibc 2.36. The binaries keep their names in both directories
# (the tests check the command name) and are committed so the tests need no
# compiler; rerun this after editing testdata/bpf/*.c.
set -eu
cd "$(dirname "$0")/../testdata/bpf"
for cc in gcc aarch64-linux-gnu-gcc; do
	out=.
	[ "$cc" = gcc ] || out=arm64
	$cc -O2 -fno-omit-frame-pointer -no-pie -o "$out/fpwalk" fpwalk.c
	$cc -O2 -fomit-frame-pointer -fno-stack-protector -no-pie -pthread -o "$out/nofp" nofp.c
	$cc -O2 -fomit-frame-pointer -fno-stack-protector -no-pie -o "$out/deep" deep.c
	$cc -O2 -fno-omit-frame-pointer -no-pie -pthread -o "$out/offcpu" offcpu.c
	$cc -O2 -fno-omit-frame-pointer -no-pie -o "$out/pltleaf" pltleaf.c
	$cc -O2 -fno-omit-frame-pointer -no-pie -o "$out/stackswitch" stackswitch.c
	$cc -O2 -fomit-frame-pointer -fno-stack-protector -no-pie -o "$out/jitwalk" jitwalk.c
done
