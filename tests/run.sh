#!/usr/bin/env bash
# run.sh - runs the tests of one build directory (build or build/asan): every test program and
# the command-line scripts (tests/cli/test_*.sh), NEMOTRON_TEST_JOBS at a time (default: the
# cores), the longest first; prints each test's output whole when it ends, with its time, and
# exits non-zero if any failed.
#
# Two tiers (docs/TESTING.md lists what each runs). The fast tier, `make test`, is what a
# developer runs after a change: it leaves out the programs in FULL_ONLY and lets the others
# skip the checks that repeat their coverage at a larger size (tests/test.h: test_full_tier).
# The full tier, NEMOTRON_TEST_FULL=1 (CI: scripts/test.sh), runs everything.
# usage: tests/run.sh BUILD_DIR
set -u
cd "$(dirname "$0")/.."
build=${1:-build}
full=${NEMOTRON_TEST_FULL:-0}
[ "$full" = 0 ] && full= || full=1
jobs_max=${NEMOTRON_TEST_JOBS:-$(nproc)}

# The CUDA backend's emulation of gpu_test_ops and of test_verify: a minute each on the 2-core
# machine, and the same kernels run in the fast tier through test_cuda_emu, test_cuda_faults
# and tests/cli/test_cuda_emu.sh (and every CUDA change is verified on a GPU before it lands).
FULL_ONLY="test_cuda_ops_emu test_verify_emu"
# Started first, so that the longest do not end the run alone (seconds on the 2-core machine).
LONGEST="test_cuda_ops_emu test_verify_emu test_cuda_emu.sh test_fixtures test_spec test_chat.sh
         test_serve.sh test_cli_habits.sh test_cuda_faults test_install.sh test_matmul_q test_sampler"

tests=()
for name in $LONGEST; do
    for t in "$build/bin/$name" "tests/cli/$name"; do [ -f "$t" ] && tests+=("$t"); done
done
for t in "$build"/bin/test_* tests/cli/test_*.sh; do
    [ -f "$t" ] || continue
    case " ${tests[*]} " in *" $t "*) continue ;; esac
    tests+=("$t")
done

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# one TEST: runs it; its output and time are printed under a lock, so two never interleave
one() {
    local t=$1 name
    name=$(basename "$t")
    local t0=$SECONDS
    if [[ $t == *.sh ]]; then bash "$t" "$build/nemotron" >"$out/$name.log" 2>&1
    else "$t" >"$out/$name.log" 2>&1; fi
    local rc=$?
    echo "$rc" >"$out/$name.rc"
    {
        flock 9
        cat "$out/$name.log"
        [ "$rc" -eq 0 ] || echo "FAILED: $t (exit $rc)"
        printf '  (%s: %d s)\n' "$name" $((SECONDS - t0))
    } 9>"$out/lock"
}

t_start=$SECONDS
for t in "${tests[@]}"; do
    name=$(basename "$t")
    if [ -z "$full" ] && [[ " $FULL_ONLY " == *" $name "* ]]; then
        echo "$name: full tier only (NEMOTRON_TEST_FULL=1)"
        continue
    fi
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
    one "$t" &
done
wait

passed=0 failed=0
for rc in "$out"/*.rc; do
    if [ "$(cat "$rc")" -eq 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
done
tier=fast
[ -n "$full" ] && tier=full
echo "tests in $((SECONDS - t_start)) s ($tier tier, $jobs_max at a time):"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
