#!/usr/bin/env bash
# test.sh - the README's second command: set up, build, and run every test, first the release
# build, then the AddressSanitizer + UBSan build with the debug allocation guard. CI runs this
# (.ci/run) with warnings as errors.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
make -s test "$@"
make -s asan "$@"
