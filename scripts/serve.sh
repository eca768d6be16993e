#!/usr/bin/env bash
# The quick start: installs what is needed, builds, and starts `ernie serve` (OpenAI API
# on http://0.0.0.0:8000). Extra arguments go to `ernie serve` (FastDeploy's flags).
#   scripts/serve.sh [--model DIR] [ernie serve flags]
# Until a trained model ships in models/, the default model is a demo checkpoint with
# random weights in the real ERNIE 4.5 format (made once by `ernie synth`): its
# answers are noise. Pass --model DIR to serve a real checkpoint.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
demo=models/.cache/demo-0.3b-layout
if [ ! -f "$demo/config.json" ]; then
  ./build/src/ernie synth --out "$demo" --preset tiny-dense --seed 7
fi
has_model=0
for arg in "$@"; do [ "$arg" = "--model" ] || [[ "$arg" == --model=* ]] && has_model=1; done
model_args=()
[ "$has_model" = 1 ] || model_args=(--model "$demo" --served-model-name ernie-demo)
exec ./build/src/ernie serve "${model_args[@]}" "$@"
