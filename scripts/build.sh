#!/usr/bin/env bash
# Installs the Debian packages (if missing) and builds everything into build/.
#   scripts/build.sh [extra cmake -D options]
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DERNIE_WERROR=ON "$@" >/dev/null
cmake --build build -j"$(nproc)"
