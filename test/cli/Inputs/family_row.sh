#!/usr/bin/env bash
# One row of the every-family matrix (issue 56): PyTorch's training step
# (oracle_run.sh at one device), dtc verify of a dp 2 x tp 2 and a pp 2
# plan against one device, and 8- and 64-GPU plans from the default search
# with their programs. Prints one line per check; exits 1 on the first failure.
#
#   family_row.sh DTC PYTHON WORK NAME [dtc compile flags for every plan...]
set -euo pipefail
dtc=$1 python=$2 work=$3 name=$4
shift 4
here=$(cd "$(dirname "$0")" && pwd)
model="$here/../../models/oracle/$name.onnx"
rm -rf "$work" && mkdir -p "$work"
oracle=$("$here/oracle_run.sh" "$dtc" "$python" "$work/oracle" "$name" \
  --gpus 1 --micro-batch 4 "$@")
echo "$oracle" | tail -1 | sed "s/^/$name /"
for plan in "dp2xtp2 --gpus 4 --dp 2 --tp 2" "pp2 --gpus 2 --dp 1 --pp 2"; do
  label=${plan%% *}
  "$dtc" compile "$model" ${plan#* } --cp 1 --seq-len 8 --global-batch 4 \
    --micro-batch 2 "$@" -o "$work/$label" > /dev/null
  verdict=$("$dtc" verify "$work/$label" --steps 2)
  echo "$name verify $label: $(echo "$verdict" | tail -1)"
done
for gpus in 8 64; do
  plan=$("$dtc" compile "$model" --gpus $gpus --seq-len 8 "$@" -o "$work/g$gpus")
  echo "$plan" | grep '^program' | sed "s/^/$name $gpus GPUs: /"
  test -s "$work/g$gpus/program.pb"
done
