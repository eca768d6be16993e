#!/usr/bin/env python3
"""Short requests next to long prompts: one mixed instance against 1P1D on the same cores (issue 19).

Runs the same workload three times, on the same CPU cores:
  mixed  one `ernie serve` with --threads 2, pinned to cores 0-1;
  1P1D   a prefill instance (--threads 1, core 0) and a decode instance (--threads 1,
         core 1) with the seed flags; clients talk to the decode instance;
  1P1D+  the same with ERNIE_PD_LOCAL_PROMPT_TOKENS=256: the decode instance computes
         prompts of up to 256 tokens itself.
Workload (fixed seed, distinct random token ids, so no prefix-cache hits): a long request
(LONG-token prompt, 8 new tokens) every LONG_PERIOD seconds, and short chats (64-token
prompt, 32 new tokens, streamed) arriving as a Poisson process, for DURATION seconds.
Prints the short requests' time to first token and time per output token (p50, p99),
the long requests' TTFT, and, for 1P1D, the KV transfer figures from the decode log.

    python3 bench/pd_bench.py build/src/ernie MODEL_DIR [--quantization wint4] [--duration 90]
"""
import argparse
import json
import os
import random
import re
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.request


def wait_until_up(port, process):
    for _ in range(1200):
        if process.poll() is not None:
            raise RuntimeError(f"server on port {port} exited with {process.returncode}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health")
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"server on port {port} did not start")


def start(binary, model, port, cores, threads, extra, log_dir, quantization, env_extra=None):
    args = ["taskset", "-c", cores, binary, "serve", "--model", model, "--host", "127.0.0.1", "--port", str(port),
            "--max-model-len", "4608", "--max-num-seqs", "16", "--threads", str(threads)]
    if quantization:
        args += ["--quantization", quantization]
    env = dict(os.environ, FD_LOG_DIR=log_dir, **(env_extra or {}))
    process = subprocess.Popen(args + extra, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until_up(port, process)
    return process


def stream_completion(port, ids, max_tokens):
    """Returns (ttft, tpot or None, total) of one streamed completion."""
    body = json.dumps({"prompt": ids, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True,
                       "stream_options": {"include_usage": True}}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                     {"content-type": "application/json"})
    start = time.perf_counter()
    first = last = None
    tokens = 0
    with urllib.request.urlopen(request, timeout=600) as response:
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            if chunk.get("choices"):
                now = time.perf_counter()
                first = first or now
                last = now
    ttft = first - start
    tpot = (last - first) / (tokens - 1) if tokens > 1 else None
    return ttft, tpot, last - start


def workload(port, seed, duration, long_tokens, long_period):
    rng = random.Random(seed)
    shorts, longs = [], []
    threads = []

    def short_request(ids):
        shorts.append(stream_completion(port, ids, 32))

    def long_request(ids):
        longs.append(stream_completion(port, ids, 8))

    events = []
    t = 0.0
    while t < duration:
        events.append((t, "short"))
        t += rng.expovariate(0.7)
    events += [(at, "long") for at in range(0, int(duration), long_period)]
    events.sort()
    begin = time.perf_counter()
    for at, kind in events:
        delay = begin + at - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        length = long_tokens if kind == "long" else 64
        ids = [rng.randrange(1000, 100000) for _ in range(length)]
        thread = threading.Thread(target=long_request if kind == "long" else short_request, args=(ids,))
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    return shorts, longs


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def report(label, shorts, longs):
    ttft = [s[0] for s in shorts]
    tpot = [s[1] for s in shorts if s[1] is not None]
    print(f"{label:6} short requests: {len(shorts)}  TTFT p50 {percentile(ttft, 0.5) * 1e3:7.1f} ms  "
          f"p99 {percentile(ttft, 0.99) * 1e3:7.1f} ms   TPOT p50 {percentile(tpot, 0.5) * 1e3:6.1f} ms  "
          f"p99 {percentile(tpot, 0.99) * 1e3:6.1f} ms")
    print(f"{label:6} long requests: {len(longs)}  TTFT mean {statistics.mean(s[0] for s in longs):6.2f} s")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("model")
    parser.add_argument("--quantization", default="wint4")
    parser.add_argument("--duration", type=int, default=90)
    parser.add_argument("--long-tokens", type=int, default=4096)
    parser.add_argument("--long-period", type=int, default=15)
    options = parser.parse_args()
    logs = tempfile.mkdtemp(prefix="pd-bench-")

    mixed = start(options.binary, options.model, 8331, "0,1", 2, [], f"{logs}/mixed", options.quantization)
    try:
        shorts, longs = workload(8331, 11, options.duration, options.long_tokens, options.long_period)
        report("mixed", shorts, longs)
    finally:
        mixed.terminate()
        mixed.wait()

    # FastDeploy's split: every prompt goes to the prefill instance. Then ours with the
    # short prompts computed by the decode instance itself (ERNIE_PD_LOCAL_PROMPT_TOKENS).
    for label, local in (("1P1D", "0"), ("1P1D+", "256")):
        prefill = start(options.binary, options.model, 8341, "0", 1,
                        ["--splitwise-role", "prefill", "--engine-worker-queue-port", "8342", "--kv-cache-ratio", "0.9"],
                        f"{logs}/prefill-{label}", options.quantization)
        decode = start(options.binary, options.model, 8351, "1", 1,
                       ["--splitwise-role", "decode", "--innode-prefill-ports", "8342", "--kv-cache-ratio", "0.1"],
                       f"{logs}/decode-{label}", options.quantization, {"ERNIE_PD_LOCAL_PROMPT_TOKENS": local})
        try:
            time.sleep(1)
            shorts, longs = workload(8351, 11, options.duration, options.long_tokens, options.long_period)
            report(label, shorts, longs)
        finally:
            decode.terminate()
            prefill.terminate()
            decode.wait()
            prefill.wait()

    # The decode log's transfer lines: the long prompts' keys and values.
    pattern = re.compile(r"(\d+) positions' keys and values \(([\d.e+-]+) MB\) from \S+ in ([\d.e+-]+) ms; "
                         r"the last arrived ([\d.e+-]+) ms after the prefill finished")
    with open(f"{logs}/decode-1P1D/api_server.log") as log:
        transfers = [tuple(float(x) for x in m.groups()) for m in pattern.finditer(log.read())]
    big = [t for t in transfers if t[0] >= options.long_tokens - 1]
    if big:
        megabytes = statistics.mean(t[1] for t in big)
        tail = statistics.mean(t[3] for t in big)
        print(f"1P1D long-prompt transfers: {len(big)}, {megabytes:.1f} MB each, streamed during the prefill; "
              f"the last rows arrived {tail:.2f} ms after the prefill finished (mean)")
    print(f"logs in {logs}")


if __name__ == "__main__":
    main()
