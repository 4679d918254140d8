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
#   mtp_model DIR                  makes DIR a model with MTP layers that reads text (below)
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
# mtp_model DIR: DIR becomes tests/fixtures/latent-mtp-f32 (random weights, one MTP step of an
# attention and a MoE layer) with a tokenizer, which text prompts and the server need: the bundled
# model's, cut to the fixture's 384 ids (its specials, the 256 bytes and the merges that make the
# rest), so every id the fixture may pick decodes.
mtp_model() {
    local dir=$1 f
    mkdir -p "$dir" || return 1
    for f in config.json generation_config.json model.safetensors; do
        ln -s "$PWD/tests/fixtures/latent-mtp-f32/$f" "$dir/$f" || return 1
    done
    ln -s "$PWD/$model/tokenizer_config.json" "$dir/tokenizer_config.json" || return 1
    python3 - "$tok" "$dir" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
v = json.load(open(sys.argv[2] + "/config.json"))["vocab_size"]
vocab = {s: i for s, i in t["model"]["vocab"].items() if i < v}
pair = lambda m: m.split(" ") if isinstance(m, str) else m
t["model"]["vocab"] = vocab
t["model"]["merges"] = [m for m in t["model"]["merges"] if all(p in vocab for p in pair(m)) and "".join(pair(m)) in vocab]
t["added_tokens"] = [a for a in t["added_tokens"] if a["id"] < v]
if len(vocab) != v: sys.exit("the cut tokenizer has %d ids, the fixture %d" % (len(vocab), v))
json.dump(t, open(sys.argv[2] + "/tokenizer.json", "w"))
PY
}
