#!/bin/sh
# Rebuilds the SFrame fixtures under testdata/sframe/ with three Debian
# toolchains, one per SFrame version:
#   v1  bookworm: gcc 12, binutils 2.40   (the host, if it is bookworm;
#                                          otherwise a bookworm chroot)
#   v2  trixie:   gcc 14, binutils 2.44   (a chroot)
#   v3  sid:      gcc 16, binutils 2.47   (a chroot)
# each for amd64 and (with Debian's cross compiler) aarch64. For every
# fixture it commits the binary, the same toolchain's `readelf --sframe`
# output (the oracle, NAME.readelf) and, for the C fixture, a stack dump
# written by the fixture itself from its innermost function (NAME.stack;
# aarch64 ones run under qemu-aarch64).
#
# The chroots are made with debootstrap when missing and reused when
# present; SFRAME_CHROOTS (default /var/tmp/sprof-sframe-chroots) says
# where. Needs root, debootstrap, qemu-user and network for the first run.
# `make test` does not run this: its outputs are committed.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
src=$root/scripts/sframe
out=$root/testdata/sframe
chroots=${SFRAME_CHROOTS:-/var/tmp/sprof-sframe-chroots}
mirror=${SFRAME_MIRROR:-http://deb.debian.org/debian}
pkgs=gcc,libc6-dev,binutils,gcc-aarch64-linux-gnu,libc6-dev-arm64-cross,binutils-aarch64-linux-gnu

[ "$(id -u)" -eq 0 ] || { echo "sframe-fixtures: run as root (chroot, debootstrap)" >&2; exit 1; }

# chroot_for SUITE prints the root of a SUITE toolchain, making it if needed.
chroot_for() {
	suite=$1
	if [ "$suite" = bookworm ] && grep -q '^12' /etc/debian_version 2>/dev/null; then
		echo /
		return
	fi
	dir=$chroots/$suite
	if [ ! -x "$dir/usr/bin/aarch64-linux-gnu-gcc" ]; then
		mkdir -p "$chroots"
		echo "sframe-fixtures: debootstrapping $suite into $dir" >&2
		debootstrap --variant=minbase --include="$pkgs" "$suite" "$dir" "$mirror" >&2
	fi
	echo "$dir"
}

# in ROOT CMD runs a shell command with the toolchain at ROOT, in /w.
in_root() {
	r=$1
	shift
	if [ "$r" = / ]; then
		(cd "$work" && sh -c "$*")
	else
		chroot "$r" sh -c "cd /w && $*"
	fi
}

cflags="-O2 -fomit-frame-pointer -fno-stack-protector -Wa,--gsframe"
for pair in 1:bookworm 2:trixie 3:sid; do
	v=${pair%%:*}
	suite=${pair#*:}
	r=$(chroot_for "$suite")
	if [ "$r" = / ]; then
		work=$(mktemp -d)
	else
		work=$r/w
		rm -rf "$work"
		mkdir -p "$work"
	fi
	cp "$src"/chain.c "$src"/x86.s "$src"/arm64.s "$src"/flex.s "$work"/

	# The C call chain, as position-independent executables.
	in_root "$r" "gcc $cflags -o chain-amd64-v$v chain.c"
	in_root "$r" "aarch64-linux-gnu-gcc $cflags -mbranch-protection=pac-ret -o chain-arm64-v$v chain.c"
	# The reference's assembler vectors, linked at fixed addresses.
	in_root "$r" "as --gsframe -o x.o x86.s && ld -o asm-amd64-v$v x.o"
	in_root "$r" "aarch64-linux-gnu-as --gsframe -o a.o arm64.s && aarch64-linux-gnu-ld -o asm-arm64-v$v a.o"
	names="chain-amd64-v$v chain-arm64-v$v asm-amd64-v$v asm-arm64-v$v"
	if [ "$v" -ge 2 ]; then # aarch64 big-endian: gas 2.40 cannot emit its SFrame
		in_root "$r" "aarch64-linux-gnu-as -EB --gsframe -o b.o arm64.s && aarch64-linux-gnu-ld -EB -o asm-arm64be-v$v b.o"
		names="$names asm-arm64be-v$v"
	fi
	if [ "$v" -eq 3 ]; then # FLEX FDEs exist only in V3
		in_root "$r" "as --gsframe -o f.o flex.s && ld -o flex-amd64-v$v f.o"
		names="$names flex-amd64-v$v"
	fi
	for n in $names; do
		case $n in *arm64*) re=aarch64-linux-gnu-readelf ;; *) re=readelf ;; esac
		in_root "$r" "$re --sframe $n" >"$out/$n.readelf"
		cp "$work/$n" "$out/$n"
	done

	# Stack dumps: amd64 natively with the toolchain's own libc, aarch64
	# under qemu with the same toolchain's cross libc.
	in_root "$r" "./chain-amd64-v$v chain-amd64-v$v.stack"
	cp "$work/chain-amd64-v$v.stack" "$out/"
	qemu-aarch64 -L "${r%/}/usr/aarch64-linux-gnu" "$work/chain-arm64-v$v" "$out/chain-arm64-v$v.stack"

	[ "$r" = / ] && rm -rf "$work" || rm -rf "$r/w"
done
echo "sframe-fixtures: wrote $(ls "$out" | wc -l) files to $out"
