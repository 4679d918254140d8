#!/usr/bin/env bash
# test_harness.sh - the test harness itself: a test that ran no check proves nothing and fails.
#   - a C test program (tests/test.h) whose main returns test_summary before any CHECK exits
#     non-zero and says so; one with a passing CHECK exits 0;
#   - a script of tests/cli (checks.sh) that ran no check fails in checks_summary;
#   - a fuzz target's replay (tests/fuzz/replay.c) of an empty corpus fails (0 inputs).
# usage (from the repository root): bash tests/cli/test_harness.sh build/nemotron
suite=harness
. "$(dirname "$0")/checks.sh"

# C: built here with the system compiler, as the unit tests are built
printf '#include "test.h"\nint main(void) { return test_summary("none"); }\n' >"$work/none.c"
printf '#include "test.h"\nint main(void) { CHECK(1, "x"); return test_summary("one"); }\n' >"$work/one.c"
if cc -std=c11 -Itests "$work/none.c" -o "$work/none" 2>"$work/cc.log" &&
    cc -std=c11 -Itests "$work/one.c" -o "$work/one" 2>>"$work/cc.log"; then
    "$work/none" >/dev/null 2>"$work/err"
    check "a test program with no check: exit $?, expected 1" test $? -eq 1
    check "a test program with no check: says so" grep -q "FAIL none: no check ran" "$work/err"
    check "a test program with one passing check: exit 0" "$work/one" >/dev/null
else
    check "compiling the harness probes: $(head -c 300 "$work/cc.log")" false
fi

# shell: a script that sources checks.sh and runs no check
printf 'suite=empty\n. tests/cli/checks.sh\nchecks_summary\n' >"$work/empty.sh"
bash "$work/empty.sh" >/dev/null 2>"$work/err"
check "a script with no check: exit $?, expected non-zero" test $? -ne 0
check "a script with no check: says so" grep -q "FAIL empty: no check ran" "$work/err"

# fuzz replay: an empty corpus replays nothing, which is a failure (the fuzzers are built by
# make test into the build directory next to the nemotron command)
replay="$(dirname "$bin")/bin/test_fuzz_config"
if [ -x "$replay" ]; then
    mkdir "$work/corpus"
    "$replay" "$work/corpus" >"$work/out" 2>&1
    check "a fuzz replay of an empty corpus: exit $?, expected 1" test $? -eq 1
    check "a fuzz replay of an empty corpus: 0 inputs said" grep -q "0 inputs replayed" "$work/out"
else
    check "$replay is built (make test builds the fuzz replays)" false
fi

checks_summary
