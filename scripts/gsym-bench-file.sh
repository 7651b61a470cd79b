#!/bin/sh
# Prints the path of a large GSYM file for the lookup benchmarks
# (symbolize/gsym BenchmarkLookup, cmd/sprof BenchmarkGsymLookupStdin):
# the `go` command of the installed Go toolchain, built with DWARF (the
# release binary has none) and converted by llvm-gsymutil-22. Both are
# kept in DIR (default ${TMPDIR:-/tmp}/sprof-gsym-bench) and reused.
# Needs go and llvm-gsymutil-22.
set -eu
dir=${1:-${TMPDIR:-/tmp}/sprof-gsym-bench}
v=$(go env GOVERSION)
out=$dir/go-$v.llvm.gsym
if [ ! -s "$out" ]; then
	mkdir -p "$dir"
	go build -trimpath -o "$dir/go-$v" cmd/go
	llvm-gsymutil-22 --quiet --num-threads=1 --convert "$dir/go-$v" -o "$out.tmp" >/dev/null
	mv "$out.tmp" "$out"
fi
echo "$out"
