// Server settings that need their own server: API keys, --max-concurrency, graceful stop.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer } from './server.mjs';

const body = (extra = {}) => JSON.stringify({ model: 'default', prompt: 'The license', max_tokens: 4, temperature: 0, ...extra });

test('API keys: 401 without a valid key, 200 with one (flag and FD_API_KEY)', { timeout: 120000 }, async () => {
  const server = await startServer(['--api-key', 'secret-1', '--api-key', 'secret-2']);
  try {
    const missing = await fetch(`${server.baseURL}/v1/completions`, { method: 'POST', body: body() });
    assert.equal(missing.status, 401);
    assert.equal((await missing.json()).error.type, 'authentication_error');
    const wrong = await fetch(`${server.baseURL}/v1/models`, { headers: { authorization: 'Bearer nope' } });
    assert.equal(wrong.status, 401);
    const client = new OpenAI({ apiKey: 'secret-2', baseURL: `${server.baseURL}/v1` });
    const response = await client.completions.create({ model: 'default', prompt: 'The license', max_tokens: 2 });
    assert.equal(response.choices.length, 1);
    assert.equal((await fetch(`${server.baseURL}/health`)).status, 200, '/health needs no key');
  } finally {
    await server.stop();
  }
  const fromEnv = await startServer([], { FD_API_KEY: 'a,b' });
  try {
    const ok = await fetch(`${fromEnv.baseURL}/v1/models`, { headers: { authorization: 'Bearer b' } });
    assert.equal(ok.status, 200);
  } finally {
    await fromEnv.stop();
  }
});

test('429 above --max-concurrency', { timeout: 120000 }, async () => {
  const server = await startServer(['--max-concurrency', '1']);
  try {
    const client = new OpenAI({ apiKey: 'x', baseURL: `${server.baseURL}/v1`, maxRetries: 0 });
    const long = await client.completions.create({ model: 'default', prompt: 'The license', max_tokens: 300,
                                                   ignore_eos: true, stream: true });
    const iterator = long[Symbol.asyncIterator]();
    await iterator.next();  // it is running now
    const second = await fetch(`${server.baseURL}/v1/completions`, { method: 'POST', body: body() });
    assert.equal(second.status, 429);
    assert.match((await second.json()).error.message, /max concurrency is 1/);
    long.controller.abort();
  } finally {
    await server.stop();
  }
});

test('SIGTERM lets an in-flight request finish, then exits 0', { timeout: 120000 }, async () => {
  const server = await startServer([]);
  // Long enough (450 tokens) that it is surely still running when the signal comes.
  const pending = fetch(`${server.baseURL}/v1/completions`, {
    method: 'POST', body: body({ max_tokens: 450, ignore_eos: true }),
  });
  const deadline = Date.now() + 30000;
  for (;;) {
    const metrics = await (await fetch(`${server.baseURL}/metrics`)).text();
    if (Number(metrics.match(/^fastdeploy:num_requests_running (\S+)$/m)[1]) >= 1) break;
    assert.ok(Date.now() < deadline, 'the request never showed up as running');
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  const code = server.stop('SIGTERM');
  const response = await pending;
  assert.equal(response.status, 200);
  assert.equal((await response.json()).usage.completion_tokens, 450);
  assert.equal(await code, 0);
});
