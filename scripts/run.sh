#!/usr/bin/env bash
# Installs what is needed, builds, and runs `ernie run` on the small trained model that
# ships in models/ernie-4.5-kjv-dense. Extra arguments go to `ernie run`
# (e.g. --prompt "..." --max-tokens 64, or --model DIR for another checkpoint).
#   scripts/run.sh [ernie run flags]
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
has_model=0
for arg in "$@"; do [ "$arg" = "--model" ] || [[ "$arg" == --model=* ]] && has_model=1; done
model_args=()
[ "$has_model" = 1 ] || model_args=(--model models/ernie-4.5-kjv-dense)
has_prompt=0
for arg in "$@"; do [ "$arg" = "--prompt" ] || [[ "$arg" == --prompt=* ]] && has_prompt=1; done
prompt_args=()
[ "$has_prompt" = 1 ] || prompt_args=(--prompt "And God said")
exec ./build/src/ernie run "${model_args[@]}" "${prompt_args[@]}" "$@"
