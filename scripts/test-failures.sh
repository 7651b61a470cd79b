#!/bin/sh
# test-failures.sh LOG prints, from the output of `go test ./...` in LOG,
# what each failing test said: its "--- FAIL" line and the first lines it
# logged, each cut to 300 characters, at most 12 lines a test and 120 in
# all. make test runs it last, so that the end of a long run's log says why
# it failed. Nothing is printed when no test failed (or LOG is missing).
set -eu
log=${1:?usage: test-failures.sh LOG}
[ -r "$log" ] || exit 0
grep -q -e '^--- FAIL' -e '^FAIL' -e '^panic:' "$log" || exit 0
echo
echo "unit tests that failed (from $log):"
awk '
	/^(=== RUN|--- PASS|--- SKIP|PASS$|ok |FAIL$|FAIL\t)/ { in_fail = 0 }
	/^--- FAIL/ || /^panic:/ { in_fail = 1; n = 0 }
	in_fail && n < 12 && total < 120 { print substr($0, 1, 300); n++; total++ }
	/^FAIL\t/ { print; total++ }
' "$log"
