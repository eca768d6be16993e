#!/usr/bin/env bash
# Installs every Debian package that building and testing ernie.cpp needs.
#   scripts/install-deps.sh [--training]
# Idempotent and non-interactive; only Debian's own repositories are used.
set -euo pipefail

packages=(
  build-essential cmake pkg-config          # compiler and build system
  libgtest-dev libgmock-dev libbenchmark-dev # unit tests and microbenchmarks
  libsentencepiece-dev                       # tokenizer.model (SentencePiece BPE)
  nlohmann-json3-dev                         # config.json, safetensors headers
  clang libclang-rt-14-dev                   # libFuzzer for the header fuzzer
  libboost-dev                               # Boost.Asio / Boost.Beast: the HTTP server
  libjpeg62-turbo-dev libpng-dev libwebp-dev libgif-dev  # image decoding for ERNIE-4.5-VL
  libavformat-dev libavcodec-dev libswscale-dev libavutil-dev  # video decoding (FFmpeg) for ERNIE-4.5-VL
  libcurl4-openssl-dev                       # image_url / video_url over http(s)
  libopenmpi-dev openmpi-bin                 # tensor / expert parallelism over MPI (mpirun)
  libzmq3-dev cppzmq-dev                     # KV transfer between prefill and decode instances (ZeroMQ)
  libharfbuzz-dev libfreetype-dev fonts-roboto-unhinted  # timestamps drawn on video frames, as FastDeploy
  python3-pil                                # Pillow: the reference for image decoding and resizing
  python3 python3-numpy                      # the independent numpy reference in tests
  python3-jinja2                             # differential tests of our Jinja engine
  python3-requests                           # a charset-sensitive streaming client in the e2e tests
  python3-jsonschema                         # the independent validator of structured output in the tests
  prometheus                                 # promtool parses /metrics in the e2e tests
  chromium fonts-dejavu-core                 # the web page's browser tests (headless, puppeteer-core)
)

# `--training` adds what tools/train_small_ernie.py needs to retrain the shipped models
# (CPU torch, the plots, and the public-domain text it learns from).
if [ "${1:-}" = "--training" ]; then
  packages+=(python3-torch python3-sentencepiece python3-matplotlib bible-kjv bible-kjv-text)
fi

# Node.js and npm run the end-to-end tests with the official OpenAI client. Some images
# ship a Node.js build that bundles npm; only ask Debian for what is absent.
command -v node >/dev/null 2>&1 || packages+=(nodejs)
command -v npm >/dev/null 2>&1 || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
echo "install-deps: installing ${missing[*]}"
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
