// bench/benchmark_serving.py, the serving benchmark in the manner of FastDeploy's
// benchmark_serving.py (issue 13, item 9), run against a real server: FastDeploy's EBChat
// and EB datasets, streamed and not, random prompts at a Poisson-like rate, the saved
// JSON's numbers, and the failures it must report (a bad dataset line, a refused key).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { scratchDir } from './scratch.mjs';
import { startServer } from './server.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const tool = path.join(root, 'bench', 'benchmark_serving.py');
const ebchat = path.join(root, 'tests', 'data', 'bench', 'ebchat_sample.jsonl');
const eb = path.join(root, 'tests', 'data', 'bench', 'eb_sample.jsonl');
const python = process.env.ERNIE_PYTHON3 ?? 'python3';
const outputLen = 8;

let server;
let keyed;

before(async () => {
  [server, keyed] = await Promise.all([startServer([]), startServer(['--api-key', 'k'])]);
});

after(async () => {
  assert.equal(await server.stop(), 0);
  assert.equal(await keyed.stop(), 0);
});

// Runs the tool; OPENAI_API_KEY is cleared unless a test sets it.
function bench(args, env = {}) {
  const run = spawnSync(python, [tool, ...args], { encoding: 'utf8', timeout: 60000,
                                                   env: { ...process.env, OPENAI_API_KEY: '', ...env } });
  assert.equal(run.error, undefined, `${python} could not run`);
  return run;
}

function saved(args) {
  const dir = scratchDir('ernie-bench-');
  const run = bench([...args, '--save-result', '--result-dir', dir, '--result-filename', 'result.json']);
  const result = existsSync(path.join(dir, 'result.json'))
    ? JSON.parse(readFileSync(path.join(dir, 'result.json'), 'utf8')) : null;
  return { run, result, dir };
}

// The max_tokens each request asks for: the line's own, else --sharegpt-output-len.
function askedTokens(file, key, count) {
  const lines = readFileSync(file, 'utf8').split('\n').filter((line) => line.trim()).map((line) => JSON.parse(line));
  return Array.from({ length: count }, (_, i) => lines[i % lines.length][key] ?? outputLen);
}

const sum = (values) => values.reduce((a, b) => a + b, 0);

test('EBChat streamed with two in flight: FastDeploy table, saved JSON, tokens as the server counted them', () => {
  const prompts = 10;  // more than the 8 lines: the dataset is cycled
  const { run, result, dir } = saved(['--base-url', server.baseURL, '--dataset-name', 'EBChat', '--dataset-path', ebchat,
                                      '--num-prompts', String(prompts), '--max-concurrency', '2',
                                      '--sharegpt-output-len', String(outputLen), '--ignore-eos',
                                      '--metric-percentiles', '50,90,99']);
  assert.equal(run.status, 0, `${run.stdout}${run.stderr}`);
  for (const line of ['============ Serving Benchmark Result ============', 'Mean TTFT (ms):', 'P90 ITL (ms):',
                      '---------------Time to First Token----------------', 'Median E2EL (ms):']) {
    assert.ok(run.stdout.includes(line), `${line}\n${run.stdout}`);
  }
  assert.match(run.stdout, /Successful requests:\s+10\s/);
  assert.match(run.stdout, /Failed requests:\s+0\s/);
  assert.equal(result.completed, prompts);
  assert.equal(result.failed, 0);
  assert.equal(result.num_prompts, prompts);
  assert.equal(result.max_concurrency, 2);
  assert.equal(result.request_rate, 'inf');
  assert.equal(result.backend, 'openai-chat');
  assert.equal(result.model_id, process.env.ERNIE_E2E_MODEL, 'found through GET /v1/models');
  // ignore_eos makes every answer exactly as long as it asked; the counts come from usage.
  assert.deepEqual(result.output_lens, askedTokens(ebchat, 'max_tokens', prompts));
  assert.equal(result.total_output_tokens, sum(result.output_lens));
  assert.equal(result.total_input_tokens, sum(result.input_lens));
  assert.ok(result.input_lens.every((n) => n > 0));
  assert.ok(result.ttfts.every((t) => typeof t === 'number' && t > 0));
  result.itls.forEach((gaps, i) => {
    assert.ok(gaps.length >= 1 && gaps.length <= result.output_lens[i] - 1, `itls[${i}]`);
    assert.ok(gaps.every((t) => typeof t === 'number' && t > 0), `itls[${i}]`);
  });
  assert.ok(result.p99_ttft_ms >= result.p90_ttft_ms && result.p90_ttft_ms >= result.median_ttft_ms);
  assert.equal(result.p50_ttft_ms, result.median_ttft_ms);
  assert.ok(result.std_ttft_ms >= 0 && result.mean_tpot_ms > 0 && result.mean_itl_ms > 0);
  assert.ok(result.mean_e2el_ms >= result.mean_ttft_ms);
  assert.ok(Math.abs(result.output_throughput - result.total_output_tokens / result.duration) < 1e-6);
  assert.ok(!existsSync(path.join(dir, 'error_output.txt')), 'no failures, no error file');
});

test('EB lines go to /v1/completions as prompts with max_dec_len as max_tokens', () => {
  const run = bench(['--base-url', server.baseURL, '--backend', 'openai', '--dataset-name', 'EB', '--dataset-path', eb,
                     '--num-prompts', '4', '--sharegpt-output-len', String(outputLen), '--ignore-eos']);
  assert.equal(run.status, 0, `${run.stdout}${run.stderr}`);
  assert.ok(run.stdout.includes('/v1/completions'), run.stdout);
  assert.match(run.stdout, /Successful requests:\s+4\s/);
  assert.match(run.stdout, new RegExp(`Total generated tokens:\\s+${sum(askedTokens(eb, 'max_dec_len', 4))}\\s`));
});

test('without streaming TTFT is the whole latency, and TPOT and ITL have no samples', () => {
  const { run, result } = saved(['--base-url', server.baseURL, '--dataset-path', ebchat, '--num-prompts', '3',
                                 '--sharegpt-output-len', String(outputLen), '--no-stream']);
  assert.equal(run.status, 0, `${run.stdout}${run.stderr}`);
  assert.match(run.stdout, /Mean TPOT \(ms\):\s+n\/a/);
  assert.equal(result.completed, 3);
  assert.equal(result.mean_ttft_ms, result.mean_e2el_ms);
  assert.equal(result.mean_tpot_ms, null);
  assert.deepEqual(result.itls, [[], [], []]);
  assert.ok(result.output_lens.every((n) => n > 0));
});

test('random prompts arrive at a gamma-distributed rate and get the output length they ask for', () => {
  const { run, result } = saved(['--base-url', server.baseURL, '--dataset-name', 'random', '--random-input-len', '12',
                                 '--random-output-len', '6', '--num-prompts', '5', '--request-rate', '50',
                                 '--burstiness', '0.5', '--seed', '3', '--percentile-metrics', 'ttft,output_len']);
  assert.equal(run.status, 0, `${run.stdout}${run.stderr}`);
  assert.match(run.stdout, /Burstiness factor:\s+0\.5/);
  assert.match(run.stdout, /P99 Output Length:/);
  assert.equal(result.completed, 5);
  assert.equal(result.request_rate, 50);
  assert.ok(result.output_lens.every((n) => n >= 5 && n <= 6), `min_tokens = max_tokens: ${result.output_lens}`);
  assert.ok(!('mean_itl_ms' in result), 'only the selected metrics are saved');
});

test('a bad dataset line stops the run and names file:line and what was expected', () => {
  const dir = scratchDir('ernie-bench-');
  const badChat = path.join(dir, 'chat.jsonl');
  writeFileSync(badChat, '{"messages": [{"role": "user", "content": "hi"}]}\n{"prompt": "hi"}\n');
  let run = bench(['--base-url', server.baseURL, '--dataset-path', badChat, '--num-prompts', '2']);
  assert.equal(run.status, 2);
  assert.ok(run.stderr.includes(`${badChat}:2: expected "messages"`), run.stderr);
  const badJson = path.join(dir, 'eb.jsonl');
  writeFileSync(badJson, '{"text": "hi"}\n\n{"text": "hi"\n');
  run = bench(['--base-url', server.baseURL, '--dataset-name', 'EB', '--dataset-path', badJson]);
  assert.equal(run.status, 2);
  assert.ok(run.stderr.includes(`${badJson}:3: not valid JSON`), run.stderr);
});

test('a server that refuses the key: every request fails, is reported, and the exit status says so', () => {
  const args = ['--base-url', keyed.baseURL, '--model', 'default', '--dataset-path', ebchat, '--num-prompts', '3',
                '--sharegpt-output-len', String(outputLen)];
  const { run, result, dir } = saved([...args, '--api-key', 'wrong']);
  assert.equal(run.status, 1, `${run.stdout}${run.stderr}`);
  assert.match(run.stdout, /Successful requests:\s+0\s/);
  assert.match(run.stdout, /Failed requests:\s+3\s/);
  assert.match(run.stderr, /HTTP 401/);
  assert.equal(result.failed, 3);
  assert.equal(result.mean_ttft_ms, null);
  const errors = readFileSync(path.join(dir, 'error_output.txt'), 'utf8').trim().split('\n').map((line) => JSON.parse(line));
  assert.deepEqual(errors.map((e) => e.request), [1, 2, 3]);
  assert.ok(errors.every((e) => e.error.startsWith('HTTP 401')));
  const allowed = bench(args, { OPENAI_API_KEY: 'k' });
  assert.equal(allowed.status, 0, `${allowed.stdout}${allowed.stderr}`);
  assert.match(allowed.stdout, /Successful requests:\s+3\s/);
});
