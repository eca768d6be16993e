#!/usr/bin/env python3
"""Prefix-hit TTFT from the --swap-space tier against recomputing (issue 19).

Starts `ernie serve` on MODEL with a small KV pool (40 blocks of 64 tokens), sends a
2,048-token prompt P, then a second one Q that evicts most of P's blocks, then P again,
and prints each request's time (max_tokens 1, so the time is the time to the first token)
and cached_tokens; once without a second tier and once with --swap-space 1.

    python3 bench/swap_tier_bench.py build/src/ernie MODEL_DIR
"""
import json
import random
import subprocess
import sys
import time
import urllib.request


def run(binary, model, port, swap_gb):
    args = [binary, "serve", "--model", model, "--port", str(port), "--host", "127.0.0.1", "--max-model-len", "2560",
            "--num-gpu-blocks-override", "40", "--max-num-seqs", "1"]
    if swap_gb:
        args += ["--swap-space", str(swap_gb)]
    server = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health")
                break
            except OSError:
                time.sleep(0.2)

        def post(ids):
            body = json.dumps({"prompt": ids, "max_tokens": 1, "temperature": 0}).encode()
            request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                             {"content-type": "application/json"})
            start = time.time()
            usage = json.load(urllib.request.urlopen(request))["usage"]
            return time.time() - start, usage["prompt_tokens_details"]["cached_tokens"]

        rng = random.Random(7)
        first = [rng.randrange(1000, 4000) for _ in range(2048)]
        second = [rng.randrange(1000, 4000) for _ in range(2048)]
        label = f"--swap-space {swap_gb}" if swap_gb else "no second tier"
        for name, ids in (("P", first), ("Q evicts P", second), ("P again", first)):
            seconds, cached = post(ids)
            print(f"{label:16} {name:11} {seconds:7.3f} s  cached_tokens {cached}")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    binary, model = sys.argv[1], sys.argv[2]
    run(binary, model, 8231, 0)
    run(binary, model, 8232, 1)
