#!/usr/bin/env bash
# Builds and runs every test: the GoogleTest suites through CTest (golden logits,
# numpy cross-checks, end-to-end CLI tests, the OpenAI-client and reliability suites),
# a short fuzzing run of each libFuzzer target, then the serving tests and the
# reliability suite against an ASan/UBSan build.
#   scripts/test.sh
# Needs ../shared (the golden checkpoints) beside the checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -d ../shared/golden ]; then
  echo "test.sh: ../shared/golden is missing; the golden tests read it from beside the checkout" >&2
  exit 1
fi
./scripts/build.sh
# The end-to-end tests use the official OpenAI Node client, pinned by package-lock.json.
npm ci --prefix tests/e2e --no-audit --no-fund --loglevel=error
(cd build && ctest -j"$(nproc)" --output-on-failure --timeout 900)
./scripts/fuzz.sh "${ERNIE_FUZZ_SECONDS:-45}"
# The serving path and the reliability suite again under ASan/UBSan (build-asan/).
./scripts/sanitize.sh
echo "test.sh: all tests passed"
