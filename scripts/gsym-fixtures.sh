#!/bin/sh
# Rebuilds the GSYM fixtures in testdata/gsym from testdata/gsym/src, and
# LLVM's GSYM file for each (the oracle the tests compare against):
#   cinline      C with inlining across files, gcc -O2, DWARF 5
#   cxx          C++ namespaces, classes, templates, lambdas, clang++ -O2,
#                DWARF 5 in zlib-compressed sections
#   cxxgcc       the same C++ built by g++ -O2 (DWARF 5, uncompressed)
#   gofix        Go, DWARF compressed by the Go linker
#   debuglink    C, gcc -O2 -gdwarf-4, stripped; DWARF in debuglink.debug
#                (found by .gnu_debuglink and build ID)
#   icf          C twins folded by gold's --icf, converted by LLVM with
#                --merged-functions --dwarf-callsites (MergedFunctionsInfo
#                and CallSiteInfo chunks)
#   cinline.sym  Breakpad symbols for cinline, written by the generator in
#                symbolize/gsym/convert (go test -run TestWriteBreakpadFixture)
# Needs gcc, clang++-22, go, binutils (ld.gold) and llvm-gsymutil-22.
set -eu
cd "$(dirname "$0")/.."
out=testdata/gsym
src=$out/src
map="-fdebug-prefix-map=$(pwd)/$src=/src -fdebug-prefix-map=$src=/src"

gcc -O2 -g $map -Wl,--build-id -o $out/cinline $src/cinline.c
clang++-22 -O2 -g -gz=zlib $map -Wl,--build-id -o $out/cxx $src/cxx.cc
g++ -O2 -g $map -Wl,--build-id -o $out/cxxgcc $src/cxx.cc
CGO_ENABLED=0 go build -trimpath -o $out/gofix $src/gofix.go
gcc -O2 -gdwarf-4 $map -Wl,--build-id -o $out/debuglink $src/debuglink.c
gcc -O2 -g -ffunction-sections -fuse-ld=gold -Wl,--icf=all $map -Wl,--build-id -o $out/icf $src/icf.c
objcopy --only-keep-debug $out/debuglink $out/debuglink.debug
objcopy --strip-debug --strip-unneeded --add-gnu-debuglink=$out/debuglink.debug $out/debuglink

for b in cinline cxx cxxgcc gofix; do
	llvm-gsymutil-22 --quiet --num-threads=1 --convert $out/$b -o $out/$b.llvm.gsym >/dev/null
done
llvm-gsymutil-22 --quiet --num-threads=1 --merged-functions --dwarf-callsites --convert $out/icf -o $out/icf.llvm.gsym >/dev/null
# LLVM converts the debug file itself; sprof finds it from the binary.
llvm-gsymutil-22 --quiet --num-threads=1 --convert $out/debuglink.debug -o $out/debuglink.llvm.gsym >/dev/null

go test ./symbolize/gsym/convert -run TestWriteBreakpadFixture -write-breakpad-fixture >/dev/null
ls -l $out
