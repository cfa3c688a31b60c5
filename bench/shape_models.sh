# Sourced by the compile benchmarks: shape_models DTC DIR writes the
# shape-only models they compile into DIR (llama-70b, gpt3-175b, gpt-1t,
# llama-405b: Llama 3.1 405B's config.json).
shape_models() {
  local dtc=$1 dir=$2
  "$dtc" modelgen --preset llama-70b --shape-only -o "$dir/llama-70b.onnx" >/dev/null
  "$dtc" modelgen --arch gpt --layers 96 --hidden 12288 --heads 96 \
    --vocab 51200 --seq-len 2048 --shape-only -o "$dir/gpt3-175b.onnx" >/dev/null
  "$dtc" modelgen --preset gpt-1t --shape-only -o "$dir/gpt-1t.onnx" >/dev/null
  "$dtc" modelgen --arch llama --layers 126 --hidden 16384 --heads 128 \
    --kv-heads 8 --ffn 53248 --vocab 128256 --seq-len 8192 --shape-only \
    -o "$dir/llama-405b.onnx" >/dev/null
}
