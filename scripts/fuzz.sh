#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and runs each for a while.
#   scripts/fuzz.sh [SECONDS] [BUILD_DIR]   (default 60, build-fuzz)
# SECONDS is the total, split between the targets.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
build="${2:-build-fuzz}"
CXX=clang++ cmake -S . -B "$build" -DERNIE_FUZZ=ON -DERNIE_BUILD_TESTS=OFF -DERNIE_BUILD_BENCHMARKS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target safetensors_header_fuzzer jinja_template_fuzzer openai_request_fuzzer pd_protocol_fuzzer -j"$(nproc)" >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# run TARGET CORPUS SECONDS ARGS...: fuzz from a copy of the seed corpus.
run() {
  local target=$1 corpus=$2 time=$3
  shift 3
  mkdir -p "$work/$target"
  cp "fuzz/corpus/$corpus"/* "$work/$target"/
  echo "== $target (${time}s)"
  "$build/fuzz/$target" "$work/$target" -max_total_time="$time" -rss_limit_mb=2048 -print_final_stats=1 "$@" 2>&1 |
    tail -n 12
}

# The safetensors parser's own size checks keep big inputs cheap; -max_len covers real
# headers of small tensors.
run safetensors_header_fuzzer safetensors_header $((seconds / 4)) -max_len=4096 -timeout=10
# Request bodies: JSON with every field the routes read; the depth and size checks run
# before the JSON library, so -max_len only bounds the run time per input.
run openai_request_fuzzer openai_request $((seconds / 4)) -max_len=16384 -timeout=10
# The Jinja engine gets the larger share: it is the bigger surface. Inputs up to 64 KiB
# hold real chat templates with their conversations; the target renders with a 100 ms
# time limit, so -timeout=10 only fires on work the budget does not see.
run jinja_template_fuzzer jinja_template $((seconds - 2 * (seconds / 4) - seconds / 8)) -max_len=65536 -timeout=10
# What a prefill instance reads from decode instances (disaggregation): frames of a task,
# a status and an outcome message.
run pd_protocol_fuzzer pd_protocol $((seconds / 8)) -max_len=4096 -timeout=10
