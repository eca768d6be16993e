#!/usr/bin/env bash
# ernie.cpp against llama.cpp on the same machine, in one run, alternating the two so
# both see the same machine state: pp512 and tg128 per weight format, plus the memory
# bandwidth the decode roofline is computed from.
#
# Usage: bench/compare_llama_cpp.sh ERNIE_MODEL_DIR LLAMA_BENCH GGUF_DIR [ROUNDS]
#   ERNIE_MODEL_DIR  checkpoint made by `ernie synth --preset 0.3b`
#   LLAMA_BENCH      path to a llama.cpp llama-bench binary (built by you, not shipped)
#   GGUF_DIR         holds bf16.gguf, q8_0.gguf and q4_0.gguf of the same weights
# Output: one line per measurement, then medians per format as a Markdown table.
set -euo pipefail
model=$1 llama_bench=$2 gguf_dir=$3 rounds=${4:-2}
root=$(cd "$(dirname "$0")/.." && pwd)
ernie=$root/build/src/ernie
results=$(mktemp)
trap 'rm -f "$results"' EXIT

bandwidth() {
  "$root/build/bench/matmul_bench" --benchmark_filter=MemoryRead --benchmark_min_time=0.5 2>/dev/null |
    awk '/BM_MemoryRead/ { for (i = 1; i <= NF; ++i) if ($i ~ /^GB\/s=/) { sub("GB/s=", "", $i); sub("G/s", "", $i); print $i } }'
}

for round in $(seq "$rounds"); do
  echo "bandwidth $(bandwidth)" | tee -a "$results"
  for pair in "none bf16" "wint8 q8_0" "wint4 q4_0"; do
    set -- $pair
    quant=$1 gguf=$gguf_dir/$2.gguf
    flag=()
    [[ $quant != none ]] && flag=(--quantization "$quant")
    json=$("$ernie" bench --model "$model" --pp 512 --tg 128 "${flag[@]}" --json 2>/dev/null | tail -1)
    pp=$(sed 's/.*"pp_tokens_per_s":\([0-9.]*\).*/\1/' <<<"$json")
    tg=$(sed 's/.*"tg_tokens_per_s":\([0-9.]*\).*/\1/' <<<"$json")
    echo "ernie $quant $pp $tg" | tee -a "$results"
    out=$("$llama_bench" -m "$gguf" -p 512 -n 128 -t 2 -r 1 -o csv 2>/dev/null)
    lpp=$(awk -F, 'NR > 1 && /"512","0"/ { gsub(/"/, "", $0); print $0 }' <<<"$out" | awk -F, '{ print $(NF-1) }')
    ltg=$(awk -F, 'NR > 1 && /"0","128"/ { gsub(/"/, "", $0); print $0 }' <<<"$out" | awk -F, '{ print $(NF-1) }')
    echo "llama $2 $lpp $ltg" | tee -a "$results"
  done
done

echo
echo "| format (ours / llama.cpp) | ernie pp512 | llama pp512 | ernie tg128 | llama tg128 |"
echo "|---|---|---|---|---|"
for pair in "none bf16" "wint8 q8_0" "wint4 q4_0"; do
  set -- $pair
  median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
  epp=$(awk -v q="$1" '$1 == "ernie" && $2 == q { print $3 }' "$results" | median)
  etg=$(awk -v q="$1" '$1 == "ernie" && $2 == q { print $4 }' "$results" | median)
  lpp=$(awk -v q="$2" '$1 == "llama" && $2 == q { print $3 }' "$results" | median)
  ltg=$(awk -v q="$2" '$1 == "llama" && $2 == q { print $4 }' "$results" | median)
  printf '| %s / %s | %.0f | %.0f | %.1f | %.1f |\n' "$1" "$2" "$epp" "$lpp" "$etg" "$ltg"
done
echo "memory read bandwidth (median GB/s): $(awk '$1 == "bandwidth" { print $2 }' "$results" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')"
