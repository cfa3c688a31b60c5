#!/usr/bin/env bash
# Trains one row of the compatibility matrix (test/models/compat, issue 29):
# `dtc verify` of a dp2 x tp2 and of a pp2 plan against one device, and 30
# steps on one device whose loss must fall (by 2%: cohere and granite scale
# their logits down and learn slowly at this rate). A row listed in
# known-failures.txt (it does not import or match PyTorch) or in
# known-failures-training.txt exits 77, which ctest shows as skipped, after
# checking that it still fails; a listed row that passes exits 1 so that its
# line is removed. A row with <row>.reference.json (scripts/compat_oracle.py)
# is then trained two steps against PyTorch's own step (oracle_row.sh).
#
#   train_row.sh <dtc> <python> <compat dir> <row>
set -uo pipefail
dtc=$1 python=$2 compat=$3 row=$4
model="$compat/$row.onnx"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

reason=$(sed -n "s/^$row: //p" "$compat/known-failures.txt" \
  "$compat/known-failures-training.txt" | head -1)

# scripts/export_compat_models.py exports every row at batch 2 x seq 8;
# training keeps that sequence length.
seq=8

check() {
  # Each check prints one line; the first failure ends the row.
  local what=$1
  shift
  if ! "$@" >"$work/out.txt" 2>&1; then
    echo "FAIL $row: $what: $(grep -m1 -E 'error|FAIL' "$work/out.txt" || tail -1 "$work/out.txt")"
    return 1
  fi
  echo "ok   $row: $what"
}

train() {
  common=(--seq-len "$seq" --global-batch 8 --lr 3e-3)
  check "compile dp2 x tp2" "$dtc" compile "$model" "${common[@]}" --gpus 4 \
    --dp 2 --tp 2 --pp 1 --cp 1 --micro-batch 2 -o "$work/dp2tp2.dtc" &&
    check "verify dp2 x tp2" "$dtc" verify "$work/dp2tp2.dtc" --steps 2 &&
    check "compile pp2" "$dtc" compile "$model" "${common[@]}" --gpus 2 \
      --dp 1 --tp 1 --pp 2 --cp 1 --micro-batch 2 -o "$work/pp2.dtc" &&
    check "verify pp2" "$dtc" verify "$work/pp2.dtc" --steps 2 &&
    check "compile one device" "$dtc" compile "$model" "${common[@]}" \
      --gpus 1 --micro-batch 8 -o "$work/one.dtc" &&
    check "tokens" "$python" "$(dirname "$0")/../cli/Inputs/make_tokens.py" \
      "$work/tokens.bin" 20000 256 &&
    check "train 30 steps" "$dtc" run "$work/one.dtc" --steps 30 \
      --data "$work/tokens.bin" --log-json &&
    "$python" - "$work/out.txt" "$row" <<'PY' &&
import json, sys
losses = [json.loads(l)["loss"] for l in open(sys.argv[1]) if l.startswith("{")]
first, last = losses[0], losses[-1]
ok = len(losses) == 30 and last < 0.98 * first
print(("ok  " if ok else "FAIL"), f" {sys.argv[2]}: loss {first:.4f} -> {last:.4f} over {len(losses)} steps")
sys.exit(0 if ok else 1)
PY
    oracle
}

oracle() {
  # PyTorch's own training step (issue 55), where scripts/compat_oracle.py
  # wrote the row's reference: loss, gradients, both AdamW updates and the
  # consolidated state_dict (test/compat/oracle_row.sh).
  [ -f "$compat/$row.reference.json" ] || return 0
  if "$(dirname "$0")/oracle_row.sh" "$dtc" "$python" "$compat" "$row" \
    "$work/oracle" >"$work/oracle.txt" 2>&1; then
    echo "ok   $row: PyTorch oracle ($(tail -1 "$work/oracle.txt"))"
    return 0
  fi
  echo "FAIL $row: PyTorch oracle:"
  grep -E '^FAIL|error' "$work/oracle.txt" || tail -3 "$work/oracle.txt"
  return 1
}

if [ ! -f "$model" ]; then
  echo "FAIL $row: $model is missing"
  exit 1
fi
if train; then
  if [ -n "$reason" ]; then
    echo "FAIL $row: listed as a known failure ($reason) but passes; remove its line"
    exit 1
  fi
  exit 0
fi
if [ -n "$reason" ]; then
  echo "known failure: $reason"
  exit 77
fi
exit 1
