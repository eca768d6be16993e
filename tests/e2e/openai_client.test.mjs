// The real server, driven by the official OpenAI Node client (openai@6) and by raw HTTP.
// Run by CTest: ERNIE_BINARY=... ERNIE_E2E_MODEL=... node --test tests/e2e/
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer } from './server.mjs';

let server;
let client;

before(async () => {
  server = await startServer(['--enable-logprob']);
  client = new OpenAI({ apiKey: 'unused', baseURL: `${server.baseURL}/v1` });
});

after(async () => {
  const code = await server.stop();
  assert.equal(code, 0, 'SIGTERM ends the server with status 0');
});

const messages = [
  { role: 'system', content: 'You are a helpful assistant.' },
  { role: 'user', content: 'What is 2+2?' },
];

test('chat completion, not streamed', async () => {
  const response = await client.chat.completions.create({ model: 'default', messages, max_tokens: 8, temperature: 0 });
  assert.equal(response.object, 'chat.completion');
  assert.match(response.id, /^chatcmpl-/);
  assert.equal(response.choices.length, 1);
  assert.equal(response.choices[0].message.role, 'assistant');
  assert.equal(typeof response.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(response.choices[0].finish_reason));
  assert.ok(response.usage.prompt_tokens > 10);
  assert.ok(response.usage.completion_tokens >= 1 && response.usage.completion_tokens <= 8);
  assert.equal(response.usage.total_tokens, response.usage.prompt_tokens + response.usage.completion_tokens);
  assert.equal(typeof response.usage.prompt_tokens_details.cached_tokens, 'number');
});

test('chat completion, streamed, equals the non-streamed greedy answer', async () => {
  // A system prompt longer than one 64-token KV block, so the second request can reuse it.
  const long = [{ role: 'system', content: 'Answer briefly and politely, in plain words. '.repeat(12) }, messages[1]];
  const whole = await client.chat.completions.create({ messages: long, max_tokens: 12, temperature: 0, model: 'default' });
  const stream = await client.chat.completions.create({
    messages: long, max_tokens: 12, temperature: 0, model: 'default', stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  let first = true;
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) {
      usage = chunk.usage;
      assert.equal(chunk.choices.length, 0);
      continue;
    }
    if (first) {
      assert.equal(chunk.choices[0].delta.role, 'assistant');
      first = false;
    }
    text += chunk.choices[0].delta.content ?? '';
    if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
  }
  assert.equal(text, whole.choices[0].message.content);
  assert.equal(finish, whole.choices[0].finish_reason);
  assert.equal(usage.completion_tokens, whole.usage.completion_tokens);
  assert.ok(usage.prompt_tokens_details.cached_tokens > 0, 'the second identical prompt hits the prefix cache');
});

test('completions: text, list of prompts, token ids, echo, logprobs', async () => {
  const one = await client.completions.create({ model: 'default', prompt: 'The license', max_tokens: 5, temperature: 0 });
  assert.equal(one.object, 'text_completion');
  assert.equal(one.choices.length, 1);
  assert.equal(one.usage.completion_tokens, 5);
  assert.equal(one.choices[0].finish_reason, 'length');

  const many = await client.completions.create({ model: 'default', prompt: ['The license', 'Copyright'], max_tokens: 3, temperature: 0 });
  assert.deepEqual(many.choices.map((c) => c.index), [0, 1]);
  assert.equal(many.choices[0].text, one.choices[0].text.slice(0, many.choices[0].text.length));

  const ids = await client.completions.create({ model: 'default', prompt: [100, 200, 300], max_tokens: 2, temperature: 0,
                                                echo: true, logprobs: 3 });
  assert.equal(ids.usage.prompt_tokens, 3);
  assert.equal(ids.choices[0].logprobs.tokens.length, 2);
  assert.equal(ids.choices[0].logprobs.top_logprobs[0] && Object.keys(ids.choices[0].logprobs.top_logprobs[0]).length, 3);
  for (const logprob of ids.choices[0].logprobs.token_logprobs) assert.ok(logprob <= 0);

  const stream = await client.completions.create({ model: 'default', prompt: 'The license', max_tokens: 5, temperature: 0, stream: true });
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.text ?? '';
  assert.equal(text, one.choices[0].text);
});

test('models list', async () => {
  const models = await client.models.list();
  const ids = [];
  for await (const model of models) ids.push(model.id);
  assert.equal(ids.length, 1);
});

test('errors: 400 names the field, 404 unknown route and model', async () => {
  await assert.rejects(client.chat.completions.create({ model: 'default', messages, temperature: -1 }),
                       (error) => error.status === 400 && /temperature/.test(error.message));
  await assert.rejects(client.chat.completions.create({ model: 'default', messages: [] }),
                       (error) => error.status === 400 && error.param === 'messages');
  const raw = await fetch(`${server.baseURL}/v1/chat/completions`, { method: 'POST', body: '{not json' });
  assert.equal(raw.status, 400);
  const body = await raw.json();
  assert.equal(body.error.type, 'invalid_request_error');
  const missing = await fetch(`${server.baseURL}/v1/nothing`);
  assert.equal(missing.status, 404);
  assert.ok((await missing.json()).error.message.includes('/v1/nothing'));
  const tooLong = await fetch(`${server.baseURL}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: Array(600).fill(5), max_tokens: 1 }),
  });
  assert.equal(tooLong.status, 400);
  assert.match((await tooLong.json()).error.message, /Input text is too long/);
});

test('413 for an oversize body', async () => {
  const response = await fetch(`${server.baseURL}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: 'x'.repeat(33 << 20),
  }).catch((error) => error);
  if (response instanceof Error) return;  // the server may close the connection before the client finishes sending
  assert.equal(response.status, 413);
});

test('/health, /ping and /metrics in Prometheus text', async () => {
  assert.equal((await fetch(`${server.baseURL}/health`)).status, 200);
  assert.equal((await fetch(`${server.baseURL}/ping`)).status, 200);
  const text = await (await fetch(`${server.baseURL}/metrics`)).text();
  const samples = new Map();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const match = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$/);
    assert.ok(match, `not a Prometheus sample line: ${line}`);
    assert.ok(!Number.isNaN(Number(match[3])), line);
    samples.set(match[1] + (match[2] ?? ''), Number(match[3]));
  }
  for (const name of ['fastdeploy:num_requests_running', 'fastdeploy:num_requests_waiting', 'fastdeploy:request_success_total',
                      'fastdeploy:prompt_tokens_total', 'fastdeploy:generation_tokens_total', 'fastdeploy:free_gpu_block_num',
                      'fastdeploy:max_gpu_block_num', 'fastdeploy:time_to_first_token_seconds_count'])
    assert.ok(samples.has(name), `missing ${name}`);
  assert.ok(samples.get('fastdeploy:request_success_total') >= 1);
});

test('a client that disconnects mid-stream frees its request', async () => {
  const controller = new AbortController();
  const stream = await client.chat.completions.create(
    { model: 'default', messages, max_tokens: 400, temperature: 0, stream: true, ignore_eos: true },
    { signal: controller.signal });
  let chunks = 0;
  try {
    for await (const chunk of stream) {
      if (++chunks === 3) controller.abort();
    }
  } catch (error) {
    assert.ok(error.name === 'APIUserAbortError' || error.name === 'AbortError', error.name);
  }
  const deadline = Date.now() + 10000;
  for (;;) {
    const text = await (await fetch(`${server.baseURL}/metrics`)).text();
    const value = (name) => Number(text.match(new RegExp(`^${name} (\\S+)$`, 'm'))[1]);
    if (value('fastdeploy:num_requests_running') === 0 &&
        value('fastdeploy:free_gpu_block_num') === value('fastdeploy:max_gpu_block_num')) break;
    assert.ok(Date.now() < deadline, 'the aborted request still holds the engine');
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  assert.match(server.output(), /client disconnected/);
});
