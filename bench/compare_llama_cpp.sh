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
#
# With LLAMA_PERPLEXITY (a llama-perplexity binary) and KJV_GGUF_DIR (f32.gguf, q8_0.gguf
# and q4_0.gguf of models/ernie-4.5-kjv-dense) set, it also compares quality at equal
# bits with one protocol for both: llama-perplexity's (context 256, the second half of
# each window scored) on tests/data/kjv-heldout.txt, perplexity and mean KL divergence
# from each engine's own unquantized model.
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

if [[ -n ${LLAMA_PERPLEXITY:-} && -n ${KJV_GGUF_DIR:-} ]]; then
  text=$root/tests/data/kjv-heldout.txt
  kjv=$root/models/ernie-4.5-kjv-dense
  base=$(mktemp)
  trap 'rm -f "$results" "$base"' EXIT
  number() { sed -n "s/.*\"$1\":\([0-9.e+-]*\).*/\1/p"; }
  lbase=$("$LLAMA_PERPLEXITY" -m "$KJV_GGUF_DIR/f32.gguf" -f "$text" -c 256 -t 2 --kl-divergence-base "$base" 2>&1 |
    sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p')
  ebase=$("$ernie" perplexity --model "$kjv" --file "$text" --protocol second-half --json 2>/dev/null | tail -1 | number perplexity)
  echo
  echo "| bits (ours / llama.cpp) | ernie PPL | vs bf16 | ernie KL | llama PPL | vs f32 | llama KL |"
  echo "|---|---|---|---|---|---|---|"
  printf '| bf16 / f32 | %.4f | | | %.4f | | |\n' "$ebase" "$lbase"
  for pair in "wint8 q8_0" "wint4 q4_0"; do
    set -- $pair
    json=$("$ernie" perplexity --model "$kjv" --file "$text" --protocol second-half --quantization "$1" --kl-divergence --json 2>/dev/null | tail -1)
    eppl=$(number perplexity <<<"$json") ekl=$(number mean_kl_divergence <<<"$json")
    out=$("$LLAMA_PERPLEXITY" -m "$KJV_GGUF_DIR/$2.gguf" -c 256 -t 2 --kl-divergence-base "$base" --kl-divergence 2>&1)
    lppl=$(sed -n 's/^Mean PPL(Q) *: *\([0-9.]*\).*/\1/p' <<<"$out")
    lkl=$(sed -n 's/^Mean *KLD: *\([0-9.]*\).*/\1/p' <<<"$out")
    printf '| %s / %s | %.4f | %+.3f%% | %.6f | %.4f | %+.3f%% | %.6f |\n' "$1" "$2" "$eppl" \
      "$(awk -v a="$eppl" -v b="$ebase" 'BEGIN { print 100 * (a / b - 1) }')" "$ekl" "$lppl" \
      "$(awk -v a="$lppl" -v b="$lbase" 'BEGIN { print 100 * (a / b - 1) }')" "$lkl"
  done
fi
