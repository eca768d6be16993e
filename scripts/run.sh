#!/usr/bin/env bash
# The quick start: installs what is needed, builds, makes a demo checkpoint and runs
# `ernie run` on it. Extra arguments go to `ernie run` (e.g. --prompt "..." --max-tokens 64).
#   scripts/run.sh [ernie run flags]
# The demo checkpoint has random weights in the real ERNIE 4.5 format, so its text is
# noise; pass --model DIR to run a real checkpoint instead.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
demo=models/.cache/demo-tiny-moe
if [ ! -f "$demo/config.json" ]; then
  ./build/src/ernie synth --out "$demo" --preset tiny-moe
fi
has_model=0
for arg in "$@"; do [ "$arg" = "--model" ] || [[ "$arg" == --model=* ]] && has_model=1; done
model_args=()
[ "$has_model" = 1 ] || model_args=(--model "$demo")
has_prompt=0
for arg in "$@"; do [ "$arg" = "--prompt" ] || [[ "$arg" == --prompt=* ]] && has_prompt=1; done
prompt_args=()
[ "$has_prompt" = 1 ] || prompt_args=(--prompt "The license grants")
exec ./build/src/ernie run "${model_args[@]}" "${prompt_args[@]}" "$@"
