# checks.sh - the check counter the tests/cli scripts share (sourced, after `suite=NAME`):
#   check DESCRIPTION COMMAND...   runs COMMAND; a failure is counted and named on stderr
#   checks_summary                 prints the suite's line; fails when a check failed or none ran
# (a script that ran no check proves nothing: it fails too).
checks=0
failed=0
check() {
    local what=$1
    shift
    checks=$((checks + 1))
    if ! "$@"; then
        failed=$((failed + 1))
        echo "FAIL $suite: $what" >&2
    fi
}
checks_summary() {
    printf '%-28s %d checks, %d failed\n' "$suite" "$checks" "$failed"
    [ "$checks" -gt 0 ] || echo "FAIL $suite: no check ran" >&2
    [ "$failed" -eq 0 ] && [ "$checks" -gt 0 ]
}
