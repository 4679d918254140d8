#!/usr/bin/env bash
# test.sh - the README's second command: set up, build, and run every test, first the release
# build, then the AddressSanitizer + UBSan build with the debug allocation guard. CI runs this
# (.ci/run) with warnings as errors.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# the full tier (docs/TESTING.md): make test alone is the developer's fast one
export NEMOTRON_TEST_FULL=1
make -s test "$@"
make -s asan "$@"
