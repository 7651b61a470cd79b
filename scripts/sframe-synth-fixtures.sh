#!/bin/sh
# Rebuilds the fixtures of sframe/synth (SFrame synthesized from .eh_frame)
# under testdata/sframe/:
#   lua-amd64-v1   Lua 5.4 (Debian bookworm's lua5.4 source), gcc 12 and
#                  binutils 2.40 on the bookworm host, SFrame V1
#   lua-amd64-v3   the same source with sid's gcc 16 and binutils 2.47, V3
#   lua-arm64-v3   the same with sid's aarch64 cross compiler, PAC-signed
#                  return addresses (-mbranch-protection=pac-ret)
#   chain-amd64-debugframe
#                  scripts/sframe/chain.c with .debug_frame instead of
#                  .eh_frame (-g -fno-asynchronous-unwind-tables)
# All are built -O2 -fomit-frame-pointer -Wa,--gsframe (except the
# .debug_frame one) and stripped: the tests compare the rules synthesized
# from .eh_frame with the .sframe gas wrote from the same directives.
# It then writes the golden outputs of `sprof sframe synth` of the two
# chain fixtures fed to the binutils readelf of each SFrame version
# (NAME.synth-vN.readelf.txt), which `make test` compares with, so that it
# needs no chroot. The raw synthesized sections that package sframe
# unwinds its stack dumps with (chain-*.synth) are rewritten by
# `go test ./sframe/synth -run TestSynthesizedSections -update`.
#
# Uses the sid and trixie chroots of scripts/sframe-fixtures.sh
# (SFRAME_CHROOTS, default /var/tmp/sprof-sframe-chroots) and the network
# for `apt-get source`. Run as root on a bookworm host.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/testdata/sframe
chroots=${SFRAME_CHROOTS:-/var/tmp/sprof-sframe-chroots}
sid=$chroots/sid
trixie=$chroots/trixie
work=$(mktemp -d)
trap 'rm -rf "$work" "$sid/w-synth" "$trixie/w-synth"' EXIT

[ -x "$sid/usr/bin/aarch64-linux-gnu-gcc" ] || { echo "sframe-synth-fixtures: no sid chroot at $sid (run scripts/sframe-fixtures.sh)" >&2; exit 1; }

(cd "$work" && apt-get source --download-only lua5.4 >/dev/null && tar xzf lua5.4_*.orig.tar.gz && mv lua-5.4.* lua)

# lua_cc CC FLAGS prints the command that builds Lua's interpreter in its
# src directory: the flags of its Makefile's linux target (which the
# minimal chroots, without make, cannot run) plus ours.
lua_cc() {
	echo "$1 -std=gnu99 -O2 -Wall -DLUA_COMPAT_5_3 -DLUA_USE_LINUX -fomit-frame-pointer -Wa,--gsframe $2 -s -o lua \$(ls *.c | grep -v luac.c) -lm -ldl -Wl,-E"
}
(cd "$work/lua/src" && sh -c "$(lua_cc gcc '')" && cp lua "$out/lua-amd64-v1")

rm -rf "$sid/w-synth" && mkdir -p "$sid/w-synth"
cp -r "$work/lua" "$sid/w-synth/amd64"
cp -r "$work/lua" "$sid/w-synth/arm64"
chroot "$sid" sh -c "cd /w-synth/amd64/src && $(lua_cc gcc '')"
chroot "$sid" sh -c "cd /w-synth/arm64/src && $(lua_cc aarch64-linux-gnu-gcc -mbranch-protection=pac-ret)"
cp "$sid/w-synth/amd64/src/lua" "$out/lua-amd64-v3"
cp "$sid/w-synth/arm64/src/lua" "$out/lua-arm64-v3"

gcc -O2 -fomit-frame-pointer -fno-stack-protector -g -fno-asynchronous-unwind-tables \
	-o "$out/chain-amd64-debugframe" "$root/scripts/sframe/chain.c"

# Golden readelf dumps of synthesized sections: V1 by the host's readelf
# 2.40, V2 by trixie's 2.44, V3 by sid's 2.47, each on a copy of the
# binary with the section added by objcopy (at address 0).
(cd "$root" && go build -o "$work/sprof" ./cmd/sprof)
for bin in chain-amd64-v1 chain-arm64-v3; do
	case $bin in *arm64*) tools=aarch64-linux-gnu- ;; *) tools= ;; esac
	for v in 1 2 3; do
		case $v in 1) r=$work/v1 ;; 2) r=$trixie/w-synth ;; 3) r=$sid/w-synth ;; esac
		mkdir -p "$r"
		"$work/sprof" sframe synth "$out/$bin" -o "$r/s" --version $v >/dev/null
		cp "$out/$bin" "$r/b"
		cmd="${tools}objcopy --remove-section=.sframe --add-section .sframe=s b e && ${tools}readelf --sframe e"
		if [ $v = 1 ]; then
			(cd "$r" && sh -c "$cmd")
		else
			chroot "${r%/w-synth}" sh -c "cd /w-synth && $cmd"
		fi >"$out/$bin.synth-v$v.readelf.txt"
		rm -rf "$r"
	done
done
echo "sframe-synth-fixtures: done"
