#!/usr/bin/env bash
# Single-stream greedy decode with and without speculative decoding, in one run: each
# configuration generates the same continuation REPS times, interleaved so that machine
# noise hits all alike; prints the median decode tokens/s, the ratio to no speculation,
# the draft acceptance, and whether the text is identical to the unspeculated one.
#   bench/speculative_decode.sh MODEL_DIR "PROMPT" MAX_TOKENS REPS 'JSON' ['JSON' ...]
# e.g. bench/speculative_decode.sh models/ernie-4.5-kjv-moe "In the beginning" 240 9 \
#        '{"method":"mtp","num_speculative_tokens":1}' '{"method":"ngram","num_speculative_tokens":3}'
set -euo pipefail
cd "$(dirname "$0")/.."
model=$1 prompt=$2 max_tokens=$3 reps=$4
shift 4
configs=("" "$@")
binary=${ERNIE_BINARY:-build/src/ernie}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for ((rep = 0; rep < reps; ++rep)); do
  for i in "${!configs[@]}"; do
    args=()
    [ -n "${configs[$i]}" ] && args=(--speculative-config "${configs[$i]}")
    "$binary" run --model "$model" --prompt "$prompt" --max-tokens "$max_tokens" --temperature 0 --ignore-eos \
      --max-model-len "${ERNIE_MAX_MODEL_LEN:-256}" "${args[@]}" >"$work/text.$i" 2>"$work/log"
    line=$(grep "tokens/s after the first" "$work/log")
    sed -E 's/.*\(([0-9.]+) tokens\/s after the first.*/\1/' <<<"$line" >>"$work/speed.$i"
    grep -oE "drafts accepted [0-9]+/[0-9]+" <<<"$line" | awk '{print $3}' >"$work/drafts.$i" || true
  done
done

median() { sort -g "$1" | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
base=$(median "$work/speed.0")
printf '%-55s %12s %7s %16s %s\n' "configuration" "tokens/s" "ratio" "drafts accepted" "text"
for i in "${!configs[@]}"; do
  speed=$(median "$work/speed.$i")
  drafts=$(cat "$work/drafts.$i" 2>/dev/null || true)
  same=$(cmp -s "$work/text.0" "$work/text.$i" && echo identical || echo DIFFERENT)
  printf '%-55s %12.1f %7.2f %16s %s\n' "${configs[$i]:-no speculation}" "$speed" \
    "$(awk -v a="$speed" -v b="$base" 'BEGIN {print a / b}')" "${drafts:--}" "$same"
done
