// FastDeploy's API extras (issue 13): token ids in responses, prompt_token_ids as input,
// usage on every chunk, the stream's charset, validation as FastDeploy answers it, and
// model names.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { spawnSync } from 'node:child_process';
import { startServer } from './server.mjs';

let server;
let client;
const messages = [{ role: 'user', content: 'In the beginning' }];

before(async () => {
  server = await startServer([]);
  client = new OpenAI({ apiKey: 'unused', baseURL: `${server.baseURL}/v1`, maxRetries: 0 });
});
after(async () => { await server.stop(); });

const post = (path, body) => fetch(`${server.baseURL}${path}`, {
  method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
});

async function events(response) {
  const text = await response.text();
  return text.split('\n\n').filter((e) => e.startsWith('data: ') && e !== 'data: [DONE]').map((e) => JSON.parse(e.slice(6)));
}

test('token ids and their text come back when asked, and are null otherwise', async () => {
  const chat = await client.chat.completions.create({ model: 'default', messages, max_tokens: 5, return_token_ids: true });
  const message = chat.choices[0].message;
  assert.ok(Array.isArray(message.prompt_token_ids) && message.prompt_token_ids.length === chat.usage.prompt_tokens);
  assert.equal(message.completion_token_ids.length, chat.usage.completion_tokens);
  assert.match(message.prompt_tokens, /In the beginning/, 'the rendered prompt');
  assert.equal(typeof message.completion_tokens, 'string');
  assert.equal(message.reasoning_content, null, 'present, null without a reasoning parser');
  const plain = await client.chat.completions.create({ model: 'default', messages, max_tokens: 2 });
  for (const key of ['prompt_token_ids', 'completion_token_ids', 'prompt_tokens', 'completion_tokens', 'reasoning_content']) {
    assert.ok(key in plain.choices[0].message, key);
    assert.equal(plain.choices[0].message[key], null, key);
  }
  const completion = await client.completions.create({ model: 'default', prompt: 'And God said', max_tokens: 4,
                                                       return_token_ids: true });
  const choice = completion.choices[0];
  assert.equal(choice.prompt_tokens, 'And God said');
  assert.equal(choice.prompt_token_ids.length, completion.usage.prompt_tokens);
  assert.equal(choice.completion_token_ids.length, completion.usage.completion_tokens);
  assert.equal(choice.completion_tokens, choice.text);
  assert.ok('prompt_logprobs' in choice && choice.prompt_logprobs === null);
});

test('streams carry the prompt ids first and the completion ids after', async () => {
  const chat = await events(await post('/v1/chat/completions',
                                       { messages, max_tokens: 6, ignore_eos: true, stream: true, return_token_ids: true }));
  const first = chat[0].choices[0].delta;
  assert.ok(first.prompt_token_ids.length > 0);
  assert.equal(first.completion_token_ids, null);
  const later = chat.slice(1).filter((chunk) => chunk.choices.length);
  for (const chunk of later) assert.equal(chunk.choices[0].delta.prompt_token_ids, null);
  assert.equal(later.flatMap((chunk) => chunk.choices[0].delta.completion_token_ids ?? []).length, 6);
  const completion = await events(await post('/v1/completions',
                                             { prompt: 'Let there be', max_tokens: 3, ignore_eos: true, stream: true,
                                               return_token_ids: true }));
  assert.equal(completion[0].choices[0].text, '');
  assert.equal(completion[0].choices[0].prompt_tokens, 'Let there be');
  assert.ok(completion[0].choices[0].prompt_token_ids.length > 0);
  assert.equal(completion.slice(1).flatMap((chunk) => chunk.choices[0].completion_token_ids ?? []).length, 3);
});

test('prompt_token_ids take priority over prompt and messages, one or a batch', async () => {
  const single = await (await post('/v1/completions', { prompt: '', prompt_token_ids: [5, 6, 7], max_tokens: 2 })).json();
  assert.equal(single.usage.prompt_tokens, 3);
  const batch = await (await post('/v1/completions', { prompt_token_ids: [[5, 6], [7, 8, 9]], max_tokens: 2 })).json();
  assert.deepEqual(batch.choices.map((choice) => choice.index), [0, 1]);
  assert.equal(batch.usage.prompt_tokens, 5);
  const chat = await (await post('/v1/chat/completions', { messages: [], prompt_token_ids: [5, 6, 7, 8], max_tokens: 2 })).json();
  assert.equal(chat.usage.prompt_tokens, 4);
  const empty = await post('/v1/completions', { prompt_token_ids: [], max_tokens: 2 });
  assert.equal(empty.status, 400);
  assert.equal((await empty.json()).error.param, 'prompt_token_ids');
});

test('streams declare UTF-8 and can carry usage on every chunk', async () => {
  const response = await post('/v1/chat/completions', {
    messages: [{ role: 'user', content: '你好，世界' }], max_tokens: 4, ignore_eos: true, stream: true,
    stream_options: { include_usage: true, continuous_usage_stats: true },
  });
  assert.equal(response.headers.get('content-type'), 'text/event-stream; charset=utf-8');
  const chunks = await events(response);
  const counts = chunks.map((chunk) => chunk.usage.completion_tokens);
  assert.ok(chunks.every((chunk) => chunk.usage.prompt_tokens > 0));
  assert.deepEqual(counts, [...counts].sort((a, b) => a - b), 'running counts only grow');
  assert.equal(counts.at(-1), 4);
});

test('validation as FastDeploy answers it: max_tokens below max_model_len, param always named', async () => {
  const tooMany = await post('/v1/completions', { prompt: 'x', max_tokens: 10000000 });
  assert.equal(tooMany.status, 400);
  const error = (await tooMany.json()).error;
  assert.equal(error.param, 'max_tokens');
  assert.match(error.message, /max_model_len/);
  for (const [field, value] of [['top_p', 2], ['temperature', -1], ['repetition_penalty', 0], ['frequency_penalty', 5]]) {
    const response = await post('/v1/completions', { prompt: 'x', max_tokens: 2, [field]: value });
    assert.equal(response.status, 400, field);
    assert.equal((await response.json()).error.param, field);
  }
});

test('any model name is served unless --served-model-name says which', async () => {
  const any = await post('/v1/completions', { model: 'gpt-4o', prompt: 'x', max_tokens: 1 });
  assert.equal(any.status, 200);
  const named = await startServer(['--served-model-name', 'ernie-tiny']);
  try {
    const wrong = await fetch(`${named.baseURL}/v1/completions`, {
      method: 'POST', body: JSON.stringify({ model: 'gpt-4o', prompt: 'x', max_tokens: 1 }),
    });
    assert.equal(wrong.status, 404);
    const right = await fetch(`${named.baseURL}/v1/completions`, {
      method: 'POST', body: JSON.stringify({ model: 'ernie-tiny', prompt: 'x', max_tokens: 1 }),
    });
    assert.equal(right.status, 200);
    assert.equal((await right.json()).model, 'ernie-tiny');
  } finally {
    await named.stop();
  }
});

async function prefixCacheTokens() {
  const text = await (await fetch(`${server.baseURL}/metrics`)).text();
  return Number(text.match(/^fastdeploy:prefix_cache_token_num (\S+)$/m)[1]);
}

test('n choices per prompt: own seeds, the prompt computed once, usage counts it once', async () => {
  const ids = Array.from({ length: 200 }, (_, i) => 10 + (i * 37) % 3000);
  const before = await prefixCacheTokens();
  const answer = await (await post('/v1/completions', { prompt_token_ids: ids, n: 3, max_tokens: 8, temperature: 1,
                                                        seed: 11, ignore_eos: true })).json();
  assert.deepEqual(answer.choices.map((choice) => choice.index), [0, 1, 2]);
  assert.equal(new Set(answer.choices.map((choice) => choice.text)).size, 3, 'each choice draws its own tokens');
  assert.equal(answer.usage.prompt_tokens, 200);
  assert.equal(answer.usage.completion_tokens, 24);
  assert.ok(await prefixCacheTokens() - before >= 2 * 192, 'the later choices found the prompt in the cache');
  const again = await (await post('/v1/completions', { prompt_token_ids: ids, n: 3, max_tokens: 8, temperature: 1,
                                                       seed: 11, ignore_eos: true })).json();
  assert.deepEqual(again.choices.map((choice) => choice.text), answer.choices.map((choice) => choice.text),
                   'seeded: the same choices again');
  const batch = await (await post('/v1/completions', { prompt: ['a', 'b'], n: 2, max_tokens: 2 })).json();
  assert.deepEqual(batch.choices.map((choice) => choice.index), [0, 1, 2, 3]);
  const chat = await events(await post('/v1/chat/completions', { messages, n: 2, max_tokens: 4, ignore_eos: true,
                                                                 stream: true }));
  const finished = chat.flatMap((chunk) => chunk.choices).filter((choice) => choice.finish_reason);
  assert.deepEqual(finished.map((choice) => choice.index).sort(), [0, 1]);
  const tooMany = await post('/v1/completions', { prompt: Array(20).fill('x'), n: 10, max_tokens: 1 });
  assert.equal(tooMany.status, 400);
  assert.equal((await tooMany.json()).error.param, 'n');
  // A client that leaves while later choices still wait: everything ends, nothing leaks.
  const controller = new AbortController();
  const pending = fetch(`${server.baseURL}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, signal: controller.signal,
    body: JSON.stringify({ prompt_token_ids: ids, n: 4, max_tokens: 400, ignore_eos: true, stream: true }),
  }).then((response) => response.text()).catch(() => null);
  await new Promise((resolve) => setTimeout(resolve, 30));
  controller.abort();
  await pending;
  for (let i = 0; i < 500; ++i) {
    const text = await (await fetch(`${server.baseURL}/metrics`)).text();
    const value = (name) => Number(text.match(new RegExp(`^fastdeploy:${name} (\\S+)$`, 'm'))[1]);
    if (value('num_requests_running') === 0 && value('free_gpu_block_num') === value('max_gpu_block_num')) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  assert.fail('the aborted choices did not all end');
});

// A strict reading of the Prometheus text format: every sample line is NAME{LABELS} VALUE,
// every histogram's buckets only grow and end at +Inf = _count.
function parsePrometheus(text) {
  const samples = new Map();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('# HELP ') || line.startsWith('# TYPE ')) continue;
    const match = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$/);
    assert.ok(match, `not a Prometheus sample line: ${line}`);
    assert.ok(!Number.isNaN(Number(match[3])) || match[3] === '+Inf', line);
    samples.set(match[1] + (match[2] ?? ''), Number(match[3]));
  }
  return samples;
}

test('metrics: FastDeploy\'s latency series, cache config and second-tier series, in valid text', async () => {
  await post('/v1/completions', { prompt: 'In the beginning', max_tokens: 4, ignore_eos: true });
  const samples = parsePrometheus(await (await fetch(`${server.baseURL}/metrics`)).text());
  for (const name of ['request_inference_time_seconds', 'request_prefill_time_seconds', 'request_decode_time_seconds',
                      'request_queue_time_seconds', 'e2e_request_latency_seconds']) {
    const count = samples.get(`fastdeploy:${name}_count`);
    assert.ok(count >= 1, name);
    assert.equal(samples.get(`fastdeploy:${name}_bucket{le="+Inf"}`), count, name);
    let previous = 0;
    for (const le of ['0.3', '0.5', '0.8', '1', '1.5', '2', '2.5', '5']) {
      const value = samples.get(`fastdeploy:${name}_bucket{le="${le}"}`);
      assert.ok(value >= previous, `${name} le=${le}`);
      previous = value;
    }
  }
  const info = [...samples.keys()].find((key) => key.startsWith('fastdeploy:cache_config_info{'));
  assert.match(info, /block_size="64"/);
  assert.match(info, /enable_prefix_caching="True"/);
  for (const name of ['cpu_hit_token_rate', 'prefix_cpu_cache_token_num', 'max_cpu_block_num', 'available_gpu_resource',
                      'first_token_latency', 'infer_latency']) {
    assert.ok(samples.has(`fastdeploy:${name}`), name);
  }
  assert.ok(samples.get('fastdeploy:infer_latency') > 0);
  // Our own gauge: the request wrote KV rows, so some of the pool is in RAM.
  assert.ok(samples.get('ernie_kv_cache_resident_bytes') > 0);
});

// Prometheus' own parser (promtool, from Debian's prometheus package) reads the page.
// Its linter objects to FastDeploy's names themselves (the "fastdeploy:" prefix, a
// counter without "_total"); those we keep, since dashboards use them. Anything else,
// and any parse error, fails.
test('metrics: promtool parses the page and finds nothing but FastDeploy\'s own names to lint', async () => {
  const text = await (await fetch(`${server.baseURL}/metrics`)).text();
  const run = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
  assert.equal(run.error, undefined, 'promtool is missing: scripts/install-deps.sh installs Debian\'s prometheus');
  assert.ok(run.status === 0 || run.status === 3, `promtool exited ${run.status}: ${run.stderr}${run.stdout}`);
  const problems = `${run.stdout}${run.stderr}`.split('\n').filter((line) => line.trim() !== '');
  const fastdeployNaming = /^fastdeploy:\w+ (metric names should not contain ':'|counter metrics should have "_total" suffix)$/;
  for (const line of problems) assert.match(line, fastdeployNaming);
  assert.ok(problems.length > 0, 'the linter saw the page (it always names the fastdeploy: prefix)');
});

test('HEAD and CORS: preflight answered, any origin allowed to read answers and streams', async () => {
  const preflight = await fetch(`${server.baseURL}/v1/chat/completions`, {
    method: 'OPTIONS',
    headers: { origin: 'http://page.example', 'access-control-request-method': 'POST',
               'access-control-request-headers': 'authorization, content-type' },
  });
  assert.equal(preflight.status, 204);
  assert.equal(preflight.headers.get('access-control-allow-origin'), '*');
  assert.match(preflight.headers.get('access-control-allow-methods'), /POST/);
  assert.equal(preflight.headers.get('access-control-allow-headers'), 'authorization, content-type');
  const head = await fetch(`${server.baseURL}/v1/models`, { method: 'HEAD' });
  assert.equal(head.status, 200);
  assert.equal(await head.text(), '');
  assert.ok(Number(head.headers.get('content-length')) > 0, 'the length of the body GET would send');
  const answer = await fetch(`${server.baseURL}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json', origin: 'http://page.example' },
    body: JSON.stringify({ prompt: 'x', max_tokens: 2, stream: true }),
  });
  assert.equal(answer.headers.get('access-control-allow-origin'), '*');
  await answer.text();
  const noOrigin = await fetch(`${server.baseURL}/health`);
  assert.equal(noOrigin.headers.get('access-control-allow-origin'), null, 'only for cross-origin requests');
  const unknown = await fetch(`${server.baseURL}/v1/nothing`, { method: 'OPTIONS' });
  assert.equal(unknown.status, 404);
});
