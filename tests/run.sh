#!/usr/bin/env bash
# run.sh - runs every test program of one build directory (build or build/asan) and the
# command-line tests; prints one line per test and exits non-zero if any failed.
# usage: tests/run.sh BUILD_DIR
set -u
cd "$(dirname "$0")/.."
build=${1:-build}
failed=0
for t in "$build"/bin/test_*; do
    [ -x "$t" ] || continue
    if ! "$t"; then
        echo "FAILED: $t"
        failed=1
    fi
done
for s in tests/cli/*.sh; do
    [ -f "$s" ] || continue
    if ! bash "$s" "$build/nemotron"; then
        echo "FAILED: $s"
        failed=1
    fi
done
if [ $failed -ne 0 ]; then echo "some tests failed"; exit 1; fi
echo "all tests passed"
