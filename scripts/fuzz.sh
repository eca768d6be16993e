#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and runs each for a while.
#   scripts/fuzz.sh [SECONDS]   (default 60)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
build=build-fuzz
CXX=clang++ cmake -S . -B "$build" -DERNIE_FUZZ=ON -DERNIE_BUILD_TESTS=OFF -DERNIE_BUILD_BENCHMARKS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target safetensors_header_fuzzer -j"$(nproc)" >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp fuzz/corpus/safetensors_header/* "$work"/
# -max_len covers real headers of small tensors; the parser's own size checks are what
# keep bigger inputs cheap.
"$build"/fuzz/safetensors_header_fuzzer "$work" -max_total_time="$seconds" -max_len=4096 -timeout=10 \
  -rss_limit_mb=2048 -print_final_stats=1 2>&1 | tail -n 12
