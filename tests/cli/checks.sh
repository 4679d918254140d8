# checks.sh - what the tests/cli scripts share; each sources it first, after `suite=NAME`:
#   the setup: the repository root as the working directory (so paths are the repository's),
#   bin (the script's first argument: the nemotron command, build/nemotron by default), model
#   and tok (the bundled model and its tokenizer.json), work (a temporary directory, removed
#   when the script exits);
#   check DESCRIPTION COMMAND...   runs COMMAND; a failure is counted and named on stderr
#   checks_summary                 prints the suite's line; fails when a check failed or none ran
#   pids                           processes to stop when the script exits (servers it started)
#   free_port                      prints a TCP port free on 127.0.0.1 now
#   json_check FILE PYTHON_EXPR    the JSON file parses and the expression over it (as j) holds
# (a script that ran no check proves nothing: it fails too).
set -u
cd "$(dirname "$0")/../.." || exit 1
bin=${1:-build/nemotron}
model=models/nemotron-h-kjv
tok=$model/tokenizer.json
work=$(mktemp -d)
pids=()
checks_cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$work"
}
trap checks_cleanup EXIT
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
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
# json_check FILE PYTHON_EXPR: the JSON file parses and the expression over it (as j) holds
json_check() {
    python3 - "$1" "$2" <<'PY'
import json, sys
try:
    j = json.load(open(sys.argv[1]))
    ok = eval(sys.argv[2])
except Exception as e:
    print("  %s: %s" % (type(e).__name__, e), file=sys.stderr); ok = False
if not ok: print("  body: " + open(sys.argv[1]).read()[:400], file=sys.stderr)
sys.exit(0 if ok else 1)
PY
}
