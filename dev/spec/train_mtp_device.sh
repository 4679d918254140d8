#!/bin/bash
# Gives the demo model one trained MTP step and writes the MTP reference fixtures (issue 14 item 4),
# on the GPU machine (transformers 5.17, torch 2.11, tokenizers, safetensors): run from the
# repository root with $OUT an empty folder and build/kjv.txt carried (bible "Gen1:1-Rev22:21").
# About 5 minutes: 3 of training, the rest start-up, hidden states, checks and the references.
#
# The device returns at most 8 files of at most 16 MiB, and the new model.safetensors alone is
# over 16 MiB, so the results come back as one tar cut in 15 MiB parts:
#     $OUT/train.log                 everything printed, PASS/FAIL lines at the end
#     $OUT/mtp_results.tar.part-aa.. model/ (the demo directory with the MTP step, train_log.json
#                                    beside it as mtp_train_log.json), fixtures/latent-mtp-f32/mtp_*,
#                                    fixtures/demo-mtp/mtp_*
# Unpack: cat OUT/mtp_results.tar.part-* | tar xf - -C DIR
set -u
set -o pipefail
test -n "${OUT:-}" || { echo "OUT is not set" >&2; exit 2; }
# KJV and MTP_TRAIN_ARGS (extra trainer options) are for trying the script out on a small text
kjv=${KJV:-build/kjv.txt}
test -f "$kjv" || { echo "$kjv is missing (carry build/kjv.txt)" >&2; exit 2; }
work=$(mktemp -d)
log="$OUT/train.log"
status=0
step() {    # step NAME COMMAND...: runs it, logs it, records a failure
    echo "== $1" | tee -a "$log"
    shift
    "$@" 2>&1 | tee -a "$log"
    local rc=${PIPESTATUS[0]}
    [ "$rc" = 0 ] || { echo "FAIL step exited $rc: $*" | tee -a "$log"; status=1; }
    return "$rc"
}
step "train the MTP step" python3 tools/train_demo.py "$kjv" "$work/train" \
    --mtp models/nemotron-h-kjv --minutes 3 ${MTP_TRAIN_ARGS:-}
mkdir -p "$work/out/fixtures/latent-mtp-f32" "$work/out/fixtures/demo-mtp"
step "reference: latent-mtp-f32" python3 tools/reference/mtp_reference.py \
    tests/fixtures/latent-mtp-f32 "$work/out/fixtures/latent-mtp-f32" --n 33 --chain 8
if [ -f "$work/train/model/model.safetensors" ]; then
    step "reference: the demo with its MTP step" python3 tools/reference/mtp_reference.py \
        "$work/train/model" "$work/out/fixtures/demo-mtp" --n 33 --chain 8
    cp -r "$work/train/model" "$work/out/model"
    cp "$work/train/train_log.json" "$work/out/model/mtp_train_log.json"
else
    echo "FAIL no trained model to write the demo's MTP reference for" | tee -a "$log"
    status=1
fi
(cd "$work/out" && ls -lR && sha256sum model/model.safetensors) 2>&1 | tee -a "$log"
tar cf - -C "$work/out" . | split -b 15m - "$OUT/mtp_results.tar.part-"
echo "== summary" | tee -a "$log"
grep -E "^(PASS|FAIL|NOTE)" "$log" | grep -v "^== " > "$work/summary"
tee -a "$log" < "$work/summary"
grep -q "^FAIL" "$work/summary" && status=1
# the trainer's two file checks and the two references' self-checks must have passed
for what in "model.safetensors" "transformers loads" "mtp_reference tests/fixtures/latent-mtp-f32" \
            "mtp_reference $work/train/model"; do
    grep -q "^PASS.*$what" "$work/summary" || { echo "FAIL no PASS line for: $what" | tee -a "$log"; status=1; }
done
echo "exit $status" | tee -a "$log"
rm -rf "$work"
exit "$status"
