#!/bin/sh
# Builds Grafana Pyroscope's server (the single binary,
# ./cmd/pyroscope) from a source checkout, for the agent's real-server
# test (agent/realserver_test.go), which scripts/pyroscope-server.sh runs.
# CI cannot build it (the sources are not reachable there); a cold build
# takes about ten minutes and a few GiB of module cache.
#
#   scripts/pyroscope-build.sh SOURCE_DIR [OUTPUT]
#
# SOURCE_DIR is a checkout of github.com/grafana/pyroscope; OUTPUT
# defaults to SOURCE_DIR/pyroscope. The build follows Pyroscope's own
# `make pyroscope/build`: static, netgo, version stamped from the
# checkout's git metadata when it has any. It leaves out the web UI (that
# needs a Node build and the embedassets tag): the APIs sprof uses and
# queries are all there.
#
# SPROF_PYROSCOPE_REPLACE="module=dir ..." builds with those modules
# taken from local directories, for a dependency the module proxy cannot
# serve (an unpublished pseudo-version). The checkout's go.mod is left as
# it is: the replacements go into a copy passed with -modfile.
#
# Then:
#
#   SPROF_PYROSCOPE_BIN=OUTPUT go test -run RealPyroscope -v ./agent
set -eu

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
	echo "usage: $0 SOURCE_DIR [OUTPUT]" >&2
	exit 2
fi
src=$(cd "$1" && pwd)
if ! grep -q '^module github.com/grafana/pyroscope' "$src/go.mod" 2>/dev/null || [ ! -d "$src/cmd/pyroscope" ]; then
	echo "$0: $src is not a Pyroscope checkout (no go.mod of github.com/grafana/pyroscope with cmd/pyroscope)" >&2
	exit 2
fi
out=${2:-$src/pyroscope}
case $out in /*) ;; *) out=$(pwd)/$out ;; esac

modflags=
if [ -n "${SPROF_PYROSCOPE_REPLACE:-}" ]; then
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	cp "$src/go.mod" "$tmp/go.mod"
	if [ -f "$src/go.sum" ]; then cp "$src/go.sum" "$tmp/go.sum"; fi
	for r in $SPROF_PYROSCOPE_REPLACE; do
		case $r in
		*=/*) ;;
		*)
			echo "$0: SPROF_PYROSCOPE_REPLACE: $r: want module=/absolute/dir" >&2
			exit 2
			;;
		esac
		(cd "$src" && go mod edit -modfile="$tmp/go.mod" -replace="$r")
	done
	modflags="-modfile=$tmp/go.mod"
fi

# The version stamp, as Pyroscope's Makefile sets it.
vprefix=$(sed -n 's/^module //p' "$src/go.mod")/pkg/util/build
ldflags='-extldflags "-static"'
if git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
	rev=$(git -C "$src" rev-parse --short HEAD)
	branch=$(git -C "$src" rev-parse --abbrev-ref HEAD)
	date=$(git -C "$src" log -1 --format=%cI)
	ldflags="$ldflags -X $vprefix.Revision=$rev -X $vprefix.Branch=$branch -X $vprefix.BuildDate=$date"
	echo "building Pyroscope at $rev ($branch, $date) into $out"
else
	echo "building Pyroscope from $src (no git metadata) into $out"
fi
cd "$src"
began=$(date +%s)
# shellcheck disable=SC2086 # modflags is one flag or none
CGO_ENABLED=0 go build $modflags -tags netgo -ldflags "$ldflags" -o "$out" ./cmd/pyroscope
echo "built $out in $(($(date +%s) - began)) s"
