#!/usr/bin/env bash
# Builds the server and the unit tests of the serving path with AddressSanitizer and
# UndefinedBehaviorSanitizer into build-asan/, runs those tests, then the reliability
# suite (tests/reliability: hostile clients, shutdown under load, the soak) against the
# sanitized server. Any report fails the run.
#   scripts/sanitize.sh
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
build=build-asan
# -g1: line tables and function names, all a sanitizer report's stack needs; full debug
# information made this the slowest build of the test run (27 minutes on a 2-core Zen 3).
# -O1 (the kernels keep -O2, src/CMakeLists.txt): the instrumented code compiles in about
# 60% of the -O2 time, and -O1 is what the sanitizers' authors recommend anyway.
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DERNIE_SANITIZE=ON -DERNIE_WERROR=ON -DERNIE_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build "$build" --target ernie util_test engine_test serving_test -j"$(nproc)"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# The sampler's statistical tests draw tens of thousands of tokens from a 103424-token
# row: they check distributions, which the regular build already does, and took about 6
# of the sanitized engine_test's 15 minutes on a 2-core Zen 3.
# DistributionTest.DrawsFromARealisticRowStayInsideTheKeptSet takes the same code paths.
statistical='DistributionTest.*OnARealisticRow:TokenMaskTest.DrawsAreTheUnmaskedDistributionRenormalisedOverTheAllowedTokens'
# The speculative-decoding tests run for 1, 2 and 3 drafted tokens per method; sanitized,
# the 18 of them took 530 of the engine_test's 590 seconds. Three drafts take every path
# fewer do (drafting, partial acceptance, rollback), so only those run here.
fewer_drafts='MethodsAndDrafts/SpeculativeTest.*/*_k1:MethodsAndDrafts/SpeculativeTest.*/*_k2'
"$build/tests/util_test" --gtest_brief=1
"$build/tests/engine_test" --gtest_brief=1 --gtest_filter="-$statistical:$fewer_drafts"
"$build/tests/serving_test" --gtest_brief=1
npm ci --prefix tests/e2e --no-audit --no-fund --loglevel=error
# Smaller soak: the sanitized server is several times slower.
ERNIE_BINARY="$PWD/$build/src/ernie" ERNIE_E2E_MODEL="$(cd ../shared/golden/models/tiny-dense && pwd)" \
  ERNIE_E2E_LOG_DIR="$PWD/$build/e2e-logs" ERNIE_SOAK_REQUESTS=500 ERNIE_SOAK_CLIENTS=50 ERNIE_SOAK_CHECK_RSS=0 \
  node --test --test-concurrency=1 tests/reliability/hostile.test.mjs tests/reliability/soak.test.mjs
echo "sanitize.sh: no sanitizer reports"
