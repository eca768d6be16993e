#!/usr/bin/env python3
"""Serving benchmark for any OpenAI-compatible server, in the manner of FastDeploy's
benchmarks/benchmark_serving.py, so that ernie.cpp, FastDeploy, vLLM, ... are measured by
the same client.

It replays FastDeploy's benchmark datasets (JSONL) or random prompts against
/v1/chat/completions or /v1/completions, with a chosen request rate (Poisson or gamma
arrivals) and concurrency, and reports TTFT, TPOT, ITL and end-to-end latency
percentiles and throughput in FastDeploy's table. Python 3 standard library only (PyYAML
is used for --hyperparameter-path when it is installed).

Usage (from the repository root; the server is already running):

  python3 bench/benchmark_serving.py --backend openai-chat --port 8000 \\
      --dataset-name EBChat --dataset-path tests/data/bench/ebchat_sample.jsonl \\
      --num-prompts 100 --max-concurrency 8 --metric-percentiles 50,90,99

  python3 bench/benchmark_serving.py --backend openai --dataset-name EB \\
      --dataset-path tests/data/bench/eb_sample.jsonl --request-rate 4 --save-result

  python3 bench/benchmark_serving.py --dataset-name random --random-input-len 50 \\
      --random-output-len 64 --num-prompts 50 --ignore-eos

docs/benchmark_serving.md has the flags, the metrics and the saved JSON in full.

Datasets (one JSON object per line; blank lines are skipped):
  EBChat  {"messages": [...], "max_tokens"?, "min_tokens"?, "response_format"?,
           "tools"?, "tool_choice"?}; the optional fields are sent when present;
           max_tokens defaults to --sharegpt-output-len, else 12288 (FastDeploy's).
  EB      {"text": "...", "max_dec_len"?}; text is the prompt; max_dec_len is sent as
           max_tokens (FastDeploy parses it but sends nothing); without it
           --sharegpt-output-len is sent when given.
  random  --random-input-len words (not tokens) and --random-output-len max_tokens,
           each drawn uniformly within +-(--random-range-ratio); min_tokens is set to
           max_tokens as FastDeploy does.
Chat datasets sent to --backend openai use the last message's content as the prompt;
EB lines sent to --backend openai-chat become one user message.

Metrics (client clock; times in ms, lengths in tokens):
  TTFT       request sent -> first chunk that carries output (text, reasoning, a tool
             call, or a usage count that grew). FastDeploy takes the first chunk with
             non-empty choices: the same on FastDeploy, whose role chunk goes out with the
             first token, but not on a server that sends the role chunk before the
             prefill, as ernie.cpp does; there it would measure almost nothing.
             Without streaming TTFT equals E2EL, as in FastDeploy.
  ITL        gaps between consecutive output chunks after the first (streaming only).
  TPOT       (E2EL - TTFT) / (output tokens - 1), for streamed requests with more than
             one output token.
  E2EL       request sent -> end of the answer (the stream's [DONE]).
  input_len / output_len / reasoning_len: usage.prompt_tokens, usage.completion_tokens
             (else the number of output chunks), usage.completion_tokens_details.
             reasoning_tokens (else the number of chunks with reasoning_content; 0
             without streaming).
Percentiles interpolate linearly between the closest ranks (numpy's default), std is
the population std (numpy's default). A metric with no samples prints "n/a" and saves
null (FastDeploy prints 0).

A request fails when the HTTP status is not 200, the stream carries an "error" object or
ends without "data: [DONE]", the response is not valid JSON, it exceeds
--request-timeout, or it generated no text, no reasoning and no tool call. Failures are
counted in the table; with --save-result they are also written to error_output.txt in
the result directory. The exit status is 1 when every request failed, 2 for bad
arguments or a bad dataset.

Differences from FastDeploy's tool, besides those above: no initial test request (a
misconfiguration shows as failed requests); --num-prompts larger than the dataset cycles
it in order (FastDeploy samples extra lines at random); --endpoint defaults per backend
(FastDeploy defaults to /v1/completions for every backend); the model sent is
--served-model-name, else --model, else the first id of GET /v1/models; the saved JSON
adds "failed", "input_lens" holds prompt tokens (FastDeploy's holds cached tokens), and
the "request_goodput:" key (sic) is left out since --goodput is not supported; the
FastDeploy-server-only metrics (s_ttft, s_itl, s_e2el, s_decode, res_ttft and the
--pd-metrics timings) are not reported.
"""

from __future__ import annotations

import argparse
import datetime
import http.client
import json
import math
import os
import queue
import random
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass, field

try:
    import yaml
except ImportError:  # JSON hyper-parameter files still work
    yaml = None

DEFAULT_ENDPOINTS = {"openai-chat": "/v1/chat/completions", "openai": "/v1/completions"}
FASTDEPLOY_DEFAULT_MAX_TOKENS = 12288

# (name, label in the table, section header, is a time in seconds). The order is
# FastDeploy's printing order.
METRICS = [
    ("ttft", "TTFT", "Time to First Token", True),
    ("tpot", "TPOT", "Time per Output Token (excl. 1st token)", True),
    ("itl", "ITL", "Inter-token Latency", True),
    ("e2el", "E2EL", "End-to-end Latency", True),
    ("input_len", "Input Length", "Input Length", False),
    ("reasoning_len", "Reasoning Length", "Reasoning Length", False),
    ("output_len", "Output Length", "Output Length", False),
]
METRIC_NAMES = [name for name, _, _, _ in METRICS]

# Prompt material for --dataset-name random.
RANDOM_WORDS = (
    "the of and to in is was for on with as by at from that this it be are were has have "
    "had not but or an which their one all two new more time year people way day man world "
    "life hand part child eye place work week case point number group problem fact water "
    "city river mountain house garden road light morning evening music story question answer "
    "reason system program market company country state school family friend teacher doctor "
    "write read speak listen learn build carry bring follow open close begin finish travel "
    "quick slow bright dark warm cold small large early late simple strong gentle"
).split()


class DatasetError(Exception):
    """A dataset line that cannot be replayed; the message names file:line."""


@dataclass
class BenchRequest:
    """One request to replay."""

    source: str  # file:line, or "random #n"
    prompt: str | None  # the completions prompt; None for chat content that is not a string
    messages: list  # the chat messages
    max_tokens: int | None
    extra_fields: dict  # min_tokens, response_format, tools, tool_choice


@dataclass
class RequestResult:
    """What one request produced, timed on the client's clock (seconds)."""

    success: bool = False
    error: str = ""
    generated_text: str = ""
    reasoning_text: str = ""
    tool_call_count: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int | None = None  # None until the server reports it
    streamed: bool = False
    ttft: float = 0.0
    itl: list = field(default_factory=list)
    latency: float = 0.0


# ---------------------------------------------------------------------------- datasets


def read_jsonl(path: str):
    """Yields (file:line, object) for each non-blank line of a JSONL file."""
    try:
        handle = open(path, encoding="utf-8")
    except OSError as error:
        raise DatasetError(f"{path}: cannot open the dataset: {error.strerror}") from None
    with handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                entry = json.loads(line)
            except json.JSONDecodeError as error:
                raise DatasetError(f"{where}: not valid JSON ({error.msg} at column {error.colno}); "
                                   "expected one JSON object per line") from None
            if not isinstance(entry, dict):
                raise DatasetError(f"{where}: expected a JSON object, got {type(entry).__name__}")
            yield where, entry


def optional_int(entry: dict, key: str, where: str, minimum: int) -> int | None:
    value = entry.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise DatasetError(f"{where}: \"{key}\" must be an integer >= {minimum}, got {json.dumps(value)}")
    return value


def load_ebchat(path: str, default_max_tokens: int | None) -> list[BenchRequest]:
    requests = []
    for where, entry in read_jsonl(path):
        messages = entry.get("messages")
        if (not isinstance(messages, list) or not messages
                or not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages)):
            raise DatasetError(f"{where}: expected \"messages\": a non-empty list of objects with a "
                               "\"role\" (EBChat format)")
        max_tokens = optional_int(entry, "max_tokens", where, 1)
        if max_tokens is None:
            max_tokens = default_max_tokens or FASTDEPLOY_DEFAULT_MAX_TOKENS
        extra_fields = {key: entry[key] for key in ("response_format", "tools", "tool_choice")
                        if entry.get(key) is not None}
        if optional_int(entry, "min_tokens", where, 0) is not None:
            extra_fields["min_tokens"] = entry["min_tokens"]
        last_content = messages[-1].get("content")
        requests.append(BenchRequest(where, last_content if isinstance(last_content, str) else None,
                                     messages, max_tokens, extra_fields))
    return requests


def load_eb(path: str, default_max_tokens: int | None) -> list[BenchRequest]:
    requests = []
    for where, entry in read_jsonl(path):
        text = entry.get("text")
        if not isinstance(text, str) or not text:
            raise DatasetError(f"{where}: expected \"text\": a non-empty string (EB format)")
        max_tokens = optional_int(entry, "max_dec_len", where, 1) or default_max_tokens
        requests.append(BenchRequest(where, text, [{"role": "user", "content": text}], max_tokens, {}))
    return requests


def make_random(count: int, input_len: int, output_len: int, range_ratio: float,
                rng: random.Random) -> list[BenchRequest]:
    def draw(length: int) -> int:
        low = max(1, int(length * (1 - range_ratio)))
        return rng.randint(low, max(low, int(length * (1 + range_ratio))))

    requests = []
    for number in range(1, count + 1):
        prompt = " ".join(rng.choice(RANDOM_WORDS) for _ in range(draw(input_len)))
        max_tokens = draw(output_len)
        requests.append(BenchRequest(f"random #{number}", prompt, [{"role": "user", "content": prompt}],
                                     max_tokens, {"min_tokens": max_tokens}))
    return requests


def sample_requests(args, rng: random.Random) -> list[BenchRequest]:
    if args.dataset_name == "random":
        return make_random(args.num_prompts, args.random_input_len, args.random_output_len,
                           args.random_range_ratio, rng)
    if not args.dataset_path:
        raise DatasetError(f"--dataset-name {args.dataset_name} needs --dataset-path")
    loader = load_ebchat if args.dataset_name == "EBChat" else load_eb
    dataset = loader(args.dataset_path, args.sharegpt_output_len)
    if not dataset:
        raise DatasetError(f"{args.dataset_path}: no requests (the file has no non-blank lines)")
    if args.shuffle:
        rng.shuffle(dataset)
    if args.backend == "openai":
        for request in dataset:
            if request.prompt is None:
                raise DatasetError(f"{request.source}: --backend openai sends the last message's content "
                                   "as the prompt, which must be a string")
    # Cycled in order so that a run is the same for every server.
    return [dataset[i % len(dataset)] for i in range(args.num_prompts)]


def load_hyperparameters(path: str | None) -> dict:
    """The fields merged into every payload: a JSON object, or YAML when PyYAML is there."""
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as error:
        raise DatasetError(f"{path}: cannot read --hyperparameter-path: {error.strerror}") from None
    try:
        values = json.loads(text)
    except json.JSONDecodeError as json_error:
        if yaml is None:
            raise DatasetError(f"{path}: not valid JSON ({json_error.msg}, line {json_error.lineno}); "
                               "YAML needs PyYAML (python3-yaml), which is not installed") from None
        try:
            values = yaml.safe_load(text)
        except yaml.YAMLError as yaml_error:
            raise DatasetError(f"{path}: neither JSON nor YAML: {yaml_error}") from None
    if not isinstance(values, dict):
        raise DatasetError(f"{path}: --hyperparameter-path must hold a mapping of payload fields")
    return values


# ---------------------------------------------------------------------------- HTTP


class Target:
    """The server: where to connect and what to send with every request."""

    def __init__(self, base_url: str, api_key: str | None):
        parsed = urllib.parse.urlsplit(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"--base-url must look like http://HOST:PORT, got {base_url!r}")
        self.https = parsed.scheme == "https"
        self.host = parsed.hostname
        self.port = parsed.port or (443 if self.https else 80)
        self.path_prefix = parsed.path.rstrip("/")
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"

    def connect(self, timeout: float) -> http.client.HTTPConnection:
        connection_class = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        return connection_class(self.host, self.port, timeout=timeout)

    def first_model_id(self, timeout: float) -> str:
        connection = self.connect(timeout)
        try:
            connection.request("GET", f"{self.path_prefix}/v1/models", headers=self.headers)
            response = connection.getresponse()
            body = response.read()
        except (OSError, http.client.HTTPException) as error:
            raise RuntimeError(f"{type(error).__name__}: {error}") from None
        finally:
            connection.close()
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status} {response.reason}: {short(body)}")
        try:
            return json.loads(body)["data"][0]["id"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise RuntimeError(f"expected {{\"data\": [{{\"id\": ...}}]}}, got {short(body)}") from None


def short(body: bytes, limit: int = 500) -> str:
    text = body.decode("utf-8", errors="replace").strip()
    return text if len(text) <= limit else text[:limit] + "..."


def error_message(event: dict) -> str:
    error = event["error"]
    return str(error.get("message", error)) if isinstance(error, dict) else str(error)


def record_usage(result: RequestResult, usage) -> None:
    if not isinstance(usage, dict):
        return
    result.input_tokens = usage.get("prompt_tokens") or result.input_tokens
    result.output_tokens = usage.get("completion_tokens") or result.output_tokens
    details = usage.get("completion_tokens_details")
    if isinstance(details, dict) and details.get("reasoning_tokens") is not None:
        result.reasoning_tokens = details["reasoning_tokens"]


def read_stream(response, sock, result: RequestResult, start: float, deadline: float) -> None:
    """Reads the SSE stream: times each chunk that carries output, collects text and usage."""
    result.streamed = True
    last_output_time = None
    output_chunks = reasoning_chunks = 0
    while True:
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            raise TimeoutError()
        sock.settimeout(remaining)
        line = response.readline()
        now = time.perf_counter()
        if not line:
            result.error = "the stream ended before \"data: [DONE]\""
            return
        line = line.strip()
        if not line.startswith(b"data:"):
            continue  # blank separators, comments, "event:" lines
        data = line[len(b"data:"):].strip()
        if data == b"[DONE]":
            result.latency = now - start
            break
        try:
            event = json.loads(data)
        except json.JSONDecodeError:
            result.error = f"a stream event is not JSON: {short(data)}"
            return
        if "error" in event:
            result.error = f"error event in the stream: {error_message(event)}"
            return
        tokens_before = result.output_tokens
        record_usage(result, event.get("usage"))
        choices = event.get("choices")
        if not choices:
            continue  # the final usage chunk
        choice = choices[0]
        delta = choice.get("delta")
        if isinstance(delta, dict):
            text, reasoning, tool_calls = delta.get("content"), delta.get("reasoning_content"), delta.get("tool_calls")
        else:
            text, reasoning, tool_calls = choice.get("text"), None, None
        result.generated_text += text or ""
        result.reasoning_text += reasoning or ""
        result.tool_call_count += len(tool_calls or [])
        # A chunk counts as output when it carries any, or when the server's running
        # usage says a token was generated (a special token may decode to no text).
        if not (text or reasoning or tool_calls or result.output_tokens > tokens_before):
            continue
        output_chunks += 1
        reasoning_chunks += 1 if reasoning else 0
        if last_output_time is None:
            result.ttft = now - start
        else:
            result.itl.append(now - last_output_time)
        last_output_time = now
    if result.output_tokens == 0:
        result.output_tokens = output_chunks
    if result.reasoning_tokens is None:
        result.reasoning_tokens = reasoning_chunks


def read_whole(response, result: RequestResult, start: float) -> None:
    body = response.read()
    result.latency = time.perf_counter() - start
    result.ttft = result.latency  # the whole answer arrives at once
    try:
        answer = json.loads(body)
    except json.JSONDecodeError:
        result.error = f"the response is not JSON: {short(body)}"
        return
    if "error" in answer:
        result.error = f"error in the response: {error_message(answer)}"
        return
    record_usage(result, answer.get("usage"))
    choices = answer.get("choices") or [{}]
    message = choices[0].get("message")
    if isinstance(message, dict):
        result.generated_text = message.get("content") or ""
        result.reasoning_text = message.get("reasoning_content") or ""
        result.tool_call_count = len(message.get("tool_calls") or [])
    else:
        result.generated_text = choices[0].get("text") or ""
    if result.reasoning_tokens is None:
        result.reasoning_tokens = 0  # no chunks to count without streaming


def send_request(target: Target, path: str, payload: dict, stream: bool, timeout: float) -> RequestResult:
    result = RequestResult()
    body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
    start = time.perf_counter()
    deadline = start + timeout
    connection = target.connect(timeout)
    try:
        connection.request("POST", path, body=body, headers=target.headers)
        # Kept: getresponse() drops connection.sock when the server closes after the answer.
        sock = connection.sock
        sock.settimeout(max(deadline - time.perf_counter(), 0.001))
        response = connection.getresponse()
        if response.status != 200:
            result.error = f"HTTP {response.status} {response.reason}: {short(response.read())}"
        elif stream:
            read_stream(response, sock, result, start, deadline)
        else:
            sock.settimeout(max(deadline - time.perf_counter(), 0.001))
            read_whole(response, result, start)
    except TimeoutError:
        result.error = f"no complete answer within --request-timeout {timeout:g} s"
    except (OSError, http.client.HTTPException) as error:
        result.error = f"{type(error).__name__}: {error}"
    finally:
        connection.close()
    if not result.error and not (result.generated_text or result.reasoning_text or result.tool_call_count):
        result.error = "No generated text found!"
    result.success = not result.error
    return result


def build_payload(request: BenchRequest, args, model_name: str, hyperparameters: dict) -> dict:
    payload = {"model": model_name}
    if args.backend == "openai-chat":
        payload["messages"] = request.messages
    else:
        payload["prompt"] = request.prompt
    payload["stream"] = not args.no_stream
    if not args.no_stream:
        payload["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    if request.max_tokens is not None:
        payload["max_tokens"] = request.max_tokens
    payload.update(request.extra_fields)
    payload.update(hyperparameters)
    if args.ignore_eos:
        payload["ignore_eos"] = True
    return payload


# ---------------------------------------------------------------------------- load


def arrival_offsets(count: int, request_rate: float, burstiness: float, rng: random.Random) -> list[float]:
    """Send times in seconds from the start: all at 0 for an infinite rate, else gaps drawn
    from a gamma distribution with shape `burstiness` and mean 1/rate (burstiness 1 is a
    Poisson process; below 1 burstier, above 1 more even)."""
    if math.isinf(request_rate):
        return [0.0] * count
    scale = 1.0 / (request_rate * burstiness)
    offsets, now = [], 0.0
    for _ in range(count):
        offsets.append(now)
        now += rng.gammavariate(burstiness, scale)
    return offsets


def run_benchmark(target: Target, path: str, payloads: list[dict], offsets: list[float],
                  max_concurrency: int | None, stream: bool, timeout: float) -> tuple[list[RequestResult], float]:
    """Sends each payload at its offset; at most max_concurrency are in flight, later ones
    wait in arrival order. Returns the results in payload order and the duration."""
    pending: queue.Queue = queue.Queue()
    results: list[RequestResult | None] = [None] * len(payloads)
    finished = threading.Semaphore(0)

    def worker() -> None:
        while True:
            index = pending.get()
            try:
                results[index] = send_request(target, path, payloads[index], stream, timeout)
            except Exception as error:  # an answer of an unexpected shape fails its request, not the run
                results[index] = RequestResult(error=f"unexpected answer: {type(error).__name__}: {error}")
            finished.release()

    # Daemon threads: an interrupted run exits without waiting for open requests.
    for _ in range(min(max_concurrency or len(payloads), len(payloads))):
        threading.Thread(target=worker, daemon=True).start()
    start = time.perf_counter()
    for index, offset in enumerate(offsets):
        delay = start + offset - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        pending.put(index)
    for _ in payloads:
        finished.acquire()
    return results, time.perf_counter() - start


# ---------------------------------------------------------------------------- metrics


def percentile(sorted_values: list[float], p: float) -> float:
    """numpy.percentile's default: linear interpolation between the closest ranks."""
    rank = (len(sorted_values) - 1) * p / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (rank - low)


def summarize(values: list[float], percentiles: list[float]) -> dict | None:
    """mean, median, population std and the percentiles; None without samples."""
    if not values:
        return None
    ordered = sorted(values)
    mean = sum(ordered) / len(ordered)
    return {"mean": mean, "median": percentile(ordered, 50),
            "std": math.sqrt(sum((v - mean) ** 2 for v in ordered) / len(ordered)),
            "percentiles": {p: percentile(ordered, p) for p in percentiles}}


def metric_samples(results: list[RequestResult]) -> dict[str, list[float]]:
    done = [r for r in results if r.success]
    return {
        "ttft": [r.ttft for r in done],
        "tpot": [(r.latency - r.ttft) / (r.output_tokens - 1) for r in done if r.streamed and r.output_tokens > 1],
        "itl": [gap for r in done for gap in r.itl],
        "e2el": [r.latency for r in done],
        "input_len": [r.input_tokens for r in done],
        "reasoning_len": [r.reasoning_tokens for r in done],
        "output_len": [r.output_tokens for r in done],
    }


def percentile_word(p: float) -> str:
    return str(int(p)) if p == int(p) else str(p)


def report(results: list[RequestResult], duration: float, selected: list[str],
           percentiles: list[float]) -> dict:
    """Prints FastDeploy's table and returns the numbers for the saved JSON."""
    done = [r for r in results if r.success]
    total_input = sum(r.input_tokens for r in done)
    total_output = sum(r.output_tokens for r in done)
    summary = {
        "duration": duration,
        "completed": len(done),
        "failed": len(results) - len(done),
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": len(done) / duration,
        "output_throughput": total_output / duration,
        "total_token_throughput": (total_input + total_output) / duration,
        "input_lens": [r.input_tokens if r.success else 0 for r in results],
        "output_lens": [r.output_tokens if r.success else 0 for r in results],
        "reasoning_lens": [r.reasoning_tokens or 0 for r in results],
        "ttfts": [r.ttft if r.success else None for r in results],
        "itls": [r.itl if r.success else [] for r in results],
        "generated_texts": [r.generated_text for r in results],
        "errors": [r.error for r in results],
    }
    row = "{:<40} {:<10}".format
    print("{:=^50}".format(" Serving Benchmark Result "))
    print(row("Successful requests:", summary["completed"]))
    print(row("Failed requests:", summary["failed"]))
    print(row("Benchmark duration (s):", f"{duration:.2f}"))
    print(row("Total input tokens:", total_input))
    print(row("Total generated tokens:", total_output))
    print(row("Request throughput (req/s):", f"{summary['request_throughput']:.3f}"))
    print(row("Output token throughput (tok/s):", f"{summary['output_throughput']:.2f}"))
    print(row("Total Token throughput (tok/s):", f"{summary['total_token_throughput']:.2f}"))
    samples = metric_samples(results)
    for name, label, header, is_time in METRICS:
        if name not in selected:
            continue
        scale, unit, key_suffix = (1000.0, " (ms)", "_ms") if is_time else (1.0, "", "")
        stats = summarize(samples[name], percentiles) or {"mean": None, "median": None, "std": None,
                                                          "percentiles": {}}
        lines = [("Mean", "mean", stats["mean"]), ("Median", "median", stats["median"])]
        lines += [(f"P{percentile_word(p)}", f"p{percentile_word(p)}", stats["percentiles"].get(p))
                  for p in percentiles]
        print("{:-^50}".format(header))
        for word, key, value in lines:
            scaled = None if value is None else value * scale
            print(row(f"{word} {label}{unit}:", "n/a" if scaled is None else f"{scaled:.2f}"))
            summary[f"{key}_{name}{key_suffix}"] = scaled
        summary[f"std_{name}{key_suffix}"] = None if stats["std"] is None else stats["std"] * scale
    print("=" * 50)
    return summary


# ---------------------------------------------------------------------------- main


def parse_percentiles(text: str) -> list[float]:
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = []
    if not values or not all(0 <= v <= 100 for v in values):
        raise argparse.ArgumentTypeError(f"expected a comma list of numbers in [0, 100] like 50,90,99, got {text!r}")
    return values


def parse_metric_names(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in METRIC_NAMES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown metric {', '.join(unknown) or text!r}; "
                                         f"expected a comma list of {','.join(METRIC_NAMES)}")
    return names


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0 (or inf), got {text!r}")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Benchmark an OpenAI-compatible server the way "
                                     "FastDeploy's benchmark_serving.py does.",
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    target = parser.add_argument_group("target")
    target.add_argument("--backend", choices=sorted(DEFAULT_ENDPOINTS), default="openai-chat",
                        help="openai-chat: POST messages; openai: POST a prompt")
    target.add_argument("--base-url", help="http://HOST:PORT (instead of --host/--port)")
    target.add_argument("--host", default="127.0.0.1")
    target.add_argument("--port", type=int, default=8000)
    target.add_argument("--endpoint", help="default: /v1/chat/completions for openai-chat, /v1/completions "
                        "for openai (FastDeploy defaults to /v1/completions for both)")
    target.add_argument("--model", help="the model id saved in the results; sent unless "
                        "--served-model-name is given (default: the first id of GET /v1/models)")
    target.add_argument("--served-model-name", help="the \"model\" sent in each request")
    target.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY"),
                        help="sent as Authorization: Bearer KEY (default: $OPENAI_API_KEY)")
    target.add_argument("--request-timeout", type=positive_float, default=600.0,
                        help="seconds one request may take, streaming included")
    data = parser.add_argument_group("data")
    data.add_argument("--dataset-name", choices=["EBChat", "EB", "random"], default="EBChat")
    data.add_argument("--dataset-path", help="JSONL file for EBChat and EB")
    data.add_argument("--num-prompts", type=positive_int, default=1000,
                      help="requests to send; the dataset is truncated or cycled")
    data.add_argument("--shuffle", action="store_true", help="shuffle the dataset (with --seed) first")
    data.add_argument("--seed", type=int, default=0, help="seeds shuffling, random prompts and arrivals")
    data.add_argument("--sharegpt-output-len", type=positive_int,
                      help=f"max_tokens for lines without one (EBChat default {FASTDEPLOY_DEFAULT_MAX_TOKENS})")
    data.add_argument("--random-input-len", type=positive_int, default=200, help="words per random prompt")
    data.add_argument("--random-output-len", type=positive_int, default=1024, help="max_tokens of random prompts")
    data.add_argument("--random-range-ratio", type=float, default=0.1,
                      help="random lengths are drawn from [len*(1-r), len*(1+r)]")
    data.add_argument("--hyperparameter-path", help="JSON (or YAML, with PyYAML) mapping merged into every payload")
    data.add_argument("--ignore-eos", action="store_true", help="send ignore_eos: true")
    data.add_argument("--no-stream", action="store_true", help="send stream: false (TTFT then equals E2EL)")
    load = parser.add_argument_group("load")
    load.add_argument("--max-concurrency", type=positive_int, help="requests in flight at most (default: all)")
    load.add_argument("--request-rate", type=positive_float, default=float("inf"),
                      help="requests per second; inf sends them all at once")
    load.add_argument("--burstiness", type=positive_float, default=1.0,
                      help="gamma shape of the arrival gaps: 1 is Poisson, <1 burstier, >1 more even")
    output = parser.add_argument_group("output")
    output.add_argument("--percentile-metrics", type=parse_metric_names, default="ttft,tpot,itl,e2el",
                        help=f"sections to print, from {','.join(METRIC_NAMES)} "
                        "(FastDeploy's default is ttft,tpot,itl,reasoning_len)")
    output.add_argument("--metric-percentiles", type=parse_percentiles, default="99",
                        help="percentiles to report, e.g. 50,90,99")
    output.add_argument("--save-result", action="store_true", help="write the results JSON")
    output.add_argument("--result-dir", default=".", help="where --save-result writes")
    output.add_argument("--result-filename", help="default: BACKEND-RATEqps[-concurrencyN]-MODEL-DATE.json")
    args = parser.parse_args(argv)
    if not 0 <= args.random_range_ratio < 1:
        parser.error(f"--random-range-ratio must be in [0, 1), got {args.random_range_ratio}")
    return args


def save_result(args, model_id: str, summary: dict, results: list[RequestResult]) -> str:
    date = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    rate = "inf" if math.isinf(args.request_rate) else args.request_rate
    concurrency = f"-concurrency{args.max_concurrency}" if args.max_concurrency else ""
    filename = args.result_filename or f"{args.backend}-{rate}qps{concurrency}-{model_id.split('/')[-1]}-{date}.json"
    os.makedirs(args.result_dir, exist_ok=True)
    path = os.path.join(args.result_dir, filename)
    saved = {"date": date, "backend": args.backend, "model_id": model_id, "num_prompts": args.num_prompts,
             "request_rate": rate, "burstiness": args.burstiness, "max_concurrency": args.max_concurrency,
             **summary}
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(saved, handle, ensure_ascii=False)
    failures = [(number, r) for number, r in enumerate(results, start=1) if not r.success]
    if failures:
        with open(os.path.join(args.result_dir, "error_output.txt"), "w", encoding="utf-8") as handle:
            for number, r in failures:
                handle.write(json.dumps({"request": number, "error": r.error}, ensure_ascii=False) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rng = random.Random(args.seed)
    try:
        requests = sample_requests(args, rng)
        hyperparameters = load_hyperparameters(args.hyperparameter_path)
        target = Target(args.base_url or f"http://{args.host}:{args.port}", args.api_key)
    except (DatasetError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    model_name = args.served_model_name or args.model
    if not model_name:
        try:
            model_name = target.first_model_id(args.request_timeout)
        except RuntimeError as error:
            print(f"error: --model not given and GET /v1/models failed: {error}", file=sys.stderr)
            return 1
    model_id = args.model or model_name
    path = target.path_prefix + (args.endpoint or DEFAULT_ENDPOINTS[args.backend])
    payloads = [build_payload(request, args, model_name, hyperparameters) for request in requests]
    offsets = arrival_offsets(len(payloads), args.request_rate, args.burstiness, rng)

    print(f"Target: {'https' if target.https else 'http'}://{target.host}:{target.port}{path}, model {model_name}")
    print(f"Traffic request rate: {args.request_rate}")
    print(f"Burstiness factor: {args.burstiness} ({'Poisson process' if args.burstiness == 1 else 'gamma arrivals'})")
    print(f"Maximum request concurrency: {args.max_concurrency}")
    results, duration = run_benchmark(target, path, payloads, offsets, args.max_concurrency,
                                      not args.no_stream, args.request_timeout)
    first_failure = next((r for r in results if not r.success), None)
    if first_failure:
        failed = sum(not r.success for r in results)
        print(f"{failed} of {len(results)} requests failed; the first: {first_failure.error}", file=sys.stderr)
    summary = report(results, duration, args.percentile_metrics, args.metric_percentiles)
    if args.save_result:
        print(f"Results saved to {save_result(args, model_id, summary, results)}")
    return 0 if summary["completed"] else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
