#!/usr/bin/env bash
# The quick start: installs what is needed, builds, and starts `ernie serve` (OpenAI API
# on http://0.0.0.0:8000) on the small trained model that ships in
# models/ernie-4.5-kjv-dense. Extra arguments go to `ernie serve` (FastDeploy's flags),
# e.g. --model DIR to serve another checkpoint.
#   scripts/serve.sh [ernie serve flags]
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
exec ./build/src/ernie serve "$@"
