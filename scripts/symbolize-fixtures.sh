#!/bin/sh
# Rebuilds the symbolize/ fixtures under testdata/symbolize/ with the host's
# gcc, g++ and binutils (the tests compare against binutils' addr2line and
# nm at test time, so only the binaries are committed):
#   c-O2          chain.c at -O2 with its symbol table and DWARF
#   c-stripped    the same program stripped of everything; its debug file
#                 is found by build ID under debug/.build-id/
#   c-debuglink   stripped too, with a .gnu_debuglink to .debug/c-debuglink.debug
#   c-minidebug   stripped, with Fedora-style MiniDebugInfo (.gnu_debugdata)
#   cpp-O2        templates.cpp at -O2 with symbols and DWARF
#   c-O2-arm64    chain.c for aarch64 (Debian's cross compiler), whose
#                 symbol table has $x/$d mapping symbols
#   rust-legacy,  rustnames.rs (no_std, so only its own functions) with
#   rust-v0       Rust's legacy and v0 symbol mangling; needs rustc (rustup),
#                 built with rustc 1.95.0
# The Go fixture (testdata/symbolize/goprog) is built by the tests
# themselves with the toolchain that runs them.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
src=$root/scripts/symbolize
out=$root/testdata/symbolize
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

# Source paths relative to the repository and no trace of the scratch
# directory, so a rebuild with the same toolchain gives the same bytes.
flags="-O2 -g -fno-omit-frame-pointer -ffile-prefix-map=$root=. -ffile-prefix-map=$work=."
gcc $flags -o c-O2 "$src/chain.c"
g++ $flags -o cpp-O2 "$src/templates.cpp"
aarch64-linux-gnu-gcc $flags -Wl,-z,max-page-size=4096 -o c-O2-arm64 "$src/chain.c"

# Build ID lookup: the debug file lives only under debug/.build-id/.
objcopy --only-keep-debug c-O2 c-O2.debug
strip --strip-all -o c-stripped c-O2
id=$(readelf -n c-O2 | sed -n 's/.*Build ID: \([0-9a-f]*\).*/\1/p')
rm -rf "$out/debug" "$out/.debug"
mkdir -p "$out/debug/.build-id/$(echo "$id" | cut -c1-2)" "$out/.debug"
cp c-O2.debug "$out/debug/.build-id/$(echo "$id" | cut -c1-2)/$(echo "$id" | cut -c3-).debug"

# Debuglink lookup: a differently compiled program (-O1, so its build ID
# differs and build-ID lookup cannot find it) with a CRC-checked link.
gcc -O1 -g -fno-omit-frame-pointer -ffile-prefix-map=$root=. -ffile-prefix-map=$work=. -o c-debuglink.full "$src/chain.c"
objcopy --only-keep-debug c-debuglink.full c-debuglink.debug
strip --strip-all -o c-debuglink c-debuglink.full
objcopy --add-gnu-debuglink=c-debuglink.debug c-debuglink
cp c-debuglink.debug "$out/.debug/"

# MiniDebugInfo, as Fedora's find-debuginfo makes it: the function symbols
# that .dynsym lacks, in an xz-compressed ELF file inside the binary.
gcc -O2 -fno-omit-frame-pointer -ffile-prefix-map=$root=. -ffile-prefix-map=$work=. -o c-minidebug.full "$src/chain.c"
nm -D c-minidebug.full --format=posix --defined-only | awk '{print $1}' | sort >dynsyms
nm c-minidebug.full --format=posix --defined-only | awk '$2 == "T" || $2 == "t" {print $1}' | sort >funcsyms
comm -13 dynsyms funcsyms >keep
objcopy --only-keep-debug c-minidebug.full mini.debug
objcopy -S --remove-section .gdb_index --remove-section .comment --keep-symbols=keep mini.debug mini
xz -k mini
strip --strip-all -R .comment -o c-minidebug c-minidebug.full
objcopy --add-section .gnu_debugdata=mini.xz c-minidebug
# and the unstripped program, for the oracle
cp c-minidebug.full "$out/c-minidebug.full"

# Rust, both manglings: legacy is rustc's default, v0 the newer scheme.
rustflags="--edition 2021 -O -C panic=abort -C link-arg=-nostartfiles -C link-arg=-static -C link-arg=-Wl,--build-id --remap-path-prefix=$root=."
rustc $rustflags -o rust-legacy "$src/rustnames.rs"
rustc $rustflags -C symbol-mangling-version=v0 -o rust-v0 "$src/rustnames.rs"

cp c-O2 c-stripped c-debuglink c-minidebug cpp-O2 c-O2-arm64 rust-legacy rust-v0 "$out/"
echo "symbolize-fixtures: wrote $(cd "$out" && find . -type f | wc -l) files to $out"
