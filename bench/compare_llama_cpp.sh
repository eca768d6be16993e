#!/usr/bin/env bash
# ernie.cpp against llama.cpp and ik_llama.cpp (the llama.cpp fork built for CPU speed) on
# the same machine, in one run, alternating the engines so all see the same machine state:
# pp512 and tg128 per weight format, and ernie's decode roofline (the read bandwidth
# measured right before and after its tests over the weight bytes it reads per token;
# `ernie bench` reports it). The ratios to ik_llama.cpp are medians over rounds of each
# round's ratio (ernie and the peer measured one right after the other), and the roofline
# share the median over rounds of each round's tg128 over that round's roofline: on a
# shared host the speed drifts between rounds by more than the differences measured, and
# a round's own pair sees the same state.
#
# Usage: bench/compare_llama_cpp.sh ERNIE_MODEL_DIR LLAMA_BENCH GGUF_DIR [ROUNDS]
#   ERNIE_MODEL_DIR  checkpoint made by `ernie synth --preset 0.3b`
#   LLAMA_BENCH      path to a llama.cpp llama-bench binary (built by you, not shipped), or - for none
#   GGUF_DIR         holds bf16.gguf, q8_0.gguf and q4_0.gguf of the same weights
#   IK_LLAMA_BENCH   (environment) path to ik_llama.cpp's llama-bench: run with run-time
#                    repacking (-rtr 1), as its users do
#   FORMATS          (environment) "QUANT GGUF_NAME" pairs separated by ";", default
#                    "none bf16;wint8 q8_0;wint4 q4_0" (e.g. "wint4 moe-q4_0" for the scaled MoE)
# Output: one line per measurement, then medians per format as a Markdown table.
#
# With LLAMA_PERPLEXITY (a llama-perplexity binary) and KJV_GGUF_DIR (f32.gguf, q8_0.gguf
# and q4_0.gguf of models/ernie-4.5-kjv-dense) set, it also compares quality at equal
# bits with one protocol for both: llama-perplexity's (context 256, the second half of
# each window scored) on tests/data/kjv-heldout.txt, perplexity and mean KL divergence
# from each engine's own unquantized model.
set -euo pipefail
model=$1 llama_bench=$2 gguf_dir=$3 rounds=${4:-2}
ik_bench=${IK_LLAMA_BENCH:-}
root=$(cd "$(dirname "$0")/.." && pwd)
ernie=$root/build/src/ernie
results=$(mktemp)
trap 'rm -f "$results"' EXIT
IFS=';' read -r -a formats <<<"${FORMATS:-none bf16;wint8 q8_0;wint4 q4_0}"

# llama-bench's pp512 and tg128 (tokens/s) from its CSV: "NAME PP TG".
peer() {
  local name=$1 bench=$2 gguf=$3
  shift 3
  local out pp tg
  out=$("$bench" -m "$gguf" -p 512 -n 128 -t 2 -r 1 -o csv "$@" 2>/dev/null)
  # The columns differ between the forks, and quoted values hold commas: read it as CSV.
  read -r pp tg < <(python3 -c '
import csv, sys
rows = list(csv.DictReader(sys.stdin))
pick = lambda p, g: next((r["avg_ts"] for r in rows if r["n_prompt"] == p and r["n_gen"] == g), "nan")
print(pick("512", "0"), pick("0", "128"))' <<<"$out")
  echo "$name $pp $tg"
}

field() { sed -n "s/.*\"$1\":\([0-9.e+-]*\).*/\1/p"; }

for round in $(seq "$rounds"); do
  for pair in "${formats[@]}"; do
    set -- $pair
    quant=$1 gguf=$gguf_dir/$2.gguf
    flag=()
    [[ $quant != none ]] && flag=(--quantization "$quant")
    json=$("$ernie" bench --model "$model" --pp 512 --tg 128 "${flag[@]}" --json 2>/dev/null | tail -1)
    echo "ernie $quant $(field pp_tokens_per_s <<<"$json") $(field tg_tokens_per_s <<<"$json") " \
         "$(field roofline_tokens_per_s <<<"$json") $(field weight_bytes_per_token <<<"$json")" | tee -a "$results"
    [[ $llama_bench != - ]] && peer "llama $2" "$llama_bench" "$gguf" | tee -a "$results"
    [[ -n $ik_bench ]] && peer "ik $2" "$ik_bench" "$gguf" -rtr 1 | tee -a "$results"
  done
done

median() { sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
column() { awk -v e="$1" -v q="$2" -v c="$3" '$1 == e && $2 == q { print $c }' "$results" | median; }
# ernie's decode as a share of the roofline measured in the same round, median over rounds
# (the bandwidth moves between rounds on a shared host; a round's own pair is steadier).
roofline_share() { awk -v q="$1" '$1 == "ernie" && $2 == q && $5 > 0 { print 100 * $4 / $5 }' "$results" | median; }
# Median over rounds of ernie's column C for QUANT over ik_llama.cpp's for GGUF, each of
# ernie's measurements paired with the peer's that follows it (FORMATS may give two of
# ours the same GGUF): paired_ratio QUANT GGUF C.
paired_ratio() {
  local r
  r=$(awk -v q="$1" -v g="$2" -v c="$3" '
    $1 == "ernie" { pending = ($2 == q) ? $c : "" }
    $1 == "ik" && $2 == g && pending != "" { if ($c + 0 > 0 && pending != "nan") print pending / $c; pending = "" }' \
    "$results" | median)
  awk -v r="$r" 'BEGIN { if (r == "nan" || r == "") print "-"; else printf "%.2f×", r }'
}
# A value with D decimals, or - for an engine that was not run.
num() { awk -v d="$1" -v v="$2" 'BEGIN { if (v == "nan" || v == "") print "-"; else printf "%.*f", d, v }'; }

echo
echo "| format (ours / GGUF) | ernie pp512 | llama.cpp | ik_llama.cpp | ernie / ik (per round) | ernie tg128 | llama.cpp | ik_llama.cpp | ernie / ik (per round) | ernie roofline (bytes/token) | ernie / roofline |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for pair in "${formats[@]}"; do
  set -- $pair
  epp=$(column ernie "$1" 3) etg=$(column ernie "$1" 4) roof=$(column ernie "$1" 5) bytes=$(column ernie "$1" 6)
  lpp=$(column llama "$2" 3) ltg=$(column llama "$2" 4) ipp=$(column ik "$2" 3) itg=$(column ik "$2" 4)
  printf '| %s / %s | %s | %s | %s | %s | %s | %s | %s | %s | %s tok/s (%s MB) | %s%% |\n' \
    "$1" "$2" "$(num 0 "$epp")" "$(num 0 "$lpp")" "$(num 0 "$ipp")" "$(paired_ratio "$1" "$2" 3)" \
    "$(num 1 "$etg")" "$(num 1 "$ltg")" "$(num 1 "$itg")" "$(paired_ratio "$1" "$2" 4)" \
    "$(num 1 "$roof")" "$(num 0 "$(awk -v b="$bytes" 'BEGIN { print b / 1e6 }')")" \
    "$(num 0 "$(roofline_share "$1")")"
done

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
