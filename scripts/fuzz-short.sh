#!/usr/bin/env bash
# Runs every Go fuzz target of the module for a short while (FUZZTIME: 10,000
# inputs by default; a count, not a duration, because a duration that ends
# while an input runs makes go test -fuzz fail with "context deadline
# exceeded"), so that `make test` keeps exploring past the committed seeds
# (which plain `go test` already replays). A failure leaves the input under
# the package's testdata/fuzz, to be committed with the fix.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${FUZZTIME:-10000x}"
grep -rl --include='*_test.go' '^func Fuzz' . | sort | while read -r file; do
	pkg="./$(dirname "${file#./}")"
	grep -o '^func Fuzz[A-Za-z0-9_]*' "$file" | sed 's/^func //' | while read -r target; do
		echo "fuzz $pkg $target ($fuzztime)"
		go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg" >/tmp/fuzz-short.$$.log 2>&1 || {
			cat /tmp/fuzz-short.$$.log
			rm -f /tmp/fuzz-short.$$.log
			exit 1
		}
	done
done
rm -f /tmp/fuzz-short.$$.log
