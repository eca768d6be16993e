// Issue 12's regressions: what a hostile or careless client did to the server, each
// checked against the answer it must get, with /health probed while it happens.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { OpenAI, startServer, postJson, healthDuring, percentile, waitRunning, waitIdle, readEvents, sleep }
  from './common.mjs';

const user = [{ role: 'user', content: 'Hello' }];

// Sends the completion `big`, and once it runs, `small`; whether `small` finished first.
async function smallFinishesFirst(baseURL, big, small) {
  let bigDone = 0;
  const bigStatus = postJson(baseURL, '/v1/completions', big)
    .then((response) => { bigDone = performance.now(); return response.status; });
  await waitRunning(baseURL);
  const response = await postJson(baseURL, '/v1/completions', small);
  const smallDone = performance.now();
  assert.equal(response.status, 200);
  assert.equal(await bigStatus, 200);
  return smallDone < bigDone;
}

// /health must answer at once while the hostile request runs. The issue asks for 100 ms;
// the bound on the worst probe leaves room for a loaded CI machine. A p90 needs enough
// probes to mean anything: of fewer than 10 (a request its budget ends within half a
// second) it is the slowest one, which a CI machine running MPI ranks beside this suite
// once pushed to 120 ms, so then the median must meet it (an IO thread that blocks
// slows every probe, the median too).
function assertHealthy(latencies, what) {
  console.log(`/health during ${what.slice(0, 60)}: ${latencies.length} probes, p50 ` +
              `${percentile(latencies, 0.5).toFixed(1)} ms, p90 ${percentile(latencies, 0.9).toFixed(1)} ms, ` +
              `worst ${Math.max(...latencies).toFixed(1)} ms`);
  const share = latencies.length >= 10 ? 0.9 : 0.5;
  assert.ok(percentile(latencies, share) < 100, `${what}: /health p${share * 100} ${percentile(latencies, share)} ms`);
  assert.ok(Math.max(...latencies) < 1000, `${what}: /health worst ${Math.max(...latencies)} ms`);
}

test('deep JSON anywhere in the body is a 400 naming the limit, not a crash', { timeout: 120000 }, async () => {
  const server = await startServer([]);
  try {
    const deep = '['.repeat(70000) + ']'.repeat(70000);
    const bodies = [
      `{"messages": ${JSON.stringify(user)}, "temperature": ${deep}}`,
      `{"messages": [${deep}]}`,
      `{"messages": [{"role": "user", "content": ${deep}}]}`,
      `{"messages": ${JSON.stringify(user)}, "chat_template_kwargs": {"a": ${deep}}}`,
      `{"messages": ${JSON.stringify(user)}, "tools": ${deep}}`,
    ];
    for (const body of bodies) {
      const response = await postJson(server.baseURL, '/v1/chat/completions', body);
      assert.equal(response.status, 400);
      assert.match((await response.json()).error.message, /the limit is 64/);
    }
    const broken = await postJson(server.baseURL, '/v1/chat/completions', '{"messages": [}');
    assert.equal(broken.status, 400);
    assert.doesNotMatch((await broken.json()).error.message, /json\.exception/);
  } finally {
    assert.equal(await server.stop(), 0);
  }
});

test('a hostile chat template is stopped by its budget while /health answers; SIGTERM still works', { timeout: 120000 },
  async () => {
    const server = await startServer([]);
    try {
      const templates = [
        "{% set s = 'a' * 60000000 %}{% for i in range(100000) %}{{ s|length }}{% endfor %}",
        "{% set s = 'a' * 1000000 %}{% for i in range(100000) %}{{ s|length }}{% endfor %}",
        '{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}',
      ];
      for (const chat_template of templates) {
        const started = performance.now();
        const { result, latencies } = await healthDuring(server.baseURL,
          postJson(server.baseURL, '/v1/chat/completions', { messages: user, chat_template, max_tokens: 2 }));
        assert.equal(result.status, 400, chat_template);
        assert.match((await result.json()).error.message, /limit/);
        assert.ok(performance.now() - started < 30000, 'the budget ends the render');
        assertHealthy(latencies, chat_template);
      }
      // SIGTERM while the worst one renders: honoured, exit 0.
      const pending = postJson(server.baseURL, '/v1/chat/completions',
                               { messages: user, chat_template: templates[2], max_tokens: 2 }).catch(() => null);
      await sleep(200);
      assert.equal(await server.stop('SIGTERM'), 0);
      await pending;
    } finally {
      await server.stop();
    }
  });

test('a 30 MB prompt is refused by its size before tokenizing, /health unaffected', { timeout: 120000 }, async () => {
  const server = await startServer([]);
  try {
    const prompt = 'And God said '.repeat(30e6 / 13);
    const { result, latencies } = await healthDuring(server.baseURL,
      postJson(server.baseURL, '/v1/completions', { prompt, max_tokens: 2 }));
    assert.equal(result.status, 400);
    assert.match((await result.json()).error.message, /bytes/);
    assertHealthy(latencies, '30 MB prompt');
    const chat = await postJson(server.baseURL, '/v1/chat/completions',
                                { messages: [{ role: 'user', content: prompt }], max_tokens: 2 });
    assert.equal(chat.status, 400);
  } finally {
    await server.stop();
  }
});

test('SIGTERM with streams still running past the grace period exits 0 and names them', { timeout: 120000 },
  async () => {
    const server = await startServer(['--timeout-graceful-shutdown', '1', '--max-model-len', '4096'],
                                     {}, { maxModelLen: null });
    const client = new OpenAI({ apiKey: 'x', baseURL: `${server.baseURL}/v1`, maxRetries: 0 });
    const streams = [];
    for (let i = 0; i < 20; ++i) {
      streams.push((async () => {
        let tokens = 0;
        try {
          const stream = await client.completions.create({ model: 'default', prompt: `In the beginning ${i}`,
                                                           max_tokens: 4000, ignore_eos: true, stream: true });
          for await (const chunk of stream) tokens += chunk.choices.length;
        } catch {
          // cut off by the shutdown: expected
        }
        return tokens;
      })());
    }
    await sleep(2000);
    const code = await server.stop('SIGTERM');
    const tokens = await Promise.all(streams);
    assert.equal(code, 0, server.output());
    assert.ok(tokens.some((count) => count < 4000), 'some streams were still running at the signal');
    assert.match(server.output(), /shutdown cut off \d+ request\(s\)/);
  });

test('one client cannot abort or collide with another client\'s request', { timeout: 120000 }, async () => {
  const server = await startServer(['--max-model-len', '2048'], {}, { maxModelLen: null });
  try {
    const victim = postJson(server.baseURL, '/v1/completions', {
      prompt: 'The victim', max_tokens: 1500, ignore_eos: true, stream: true, request_id: 'victim-1',
      stream_options: { include_usage: true },
    });
    await sleep(100);
    // The same id while the victim runs: refused, and the victim is untouched.
    const clash = await postJson(server.baseURL, '/v1/completions',
                                 { prompt: 'x', max_tokens: 2, request_id: 'victim-1' });
    assert.equal(clash.status, 400);
    assert.match((await clash.json()).error.message, /already in flight/);
    for (const id of ['victim-1', 'cmpl-victim-1']) {
      const controller = new AbortController();
      const attack = postJson(server.baseURL, '/v1/completions',
                              { prompt: 'x', max_tokens: 500, stream: true, request_id: `${id}-0` },
                              { signal: controller.signal });
      const response = await attack;
      controller.abort();
      await response.text().catch(() => {});
    }
    const events = await readEvents(await victim);
    const usage = events.at(-1).usage;
    assert.equal(usage.completion_tokens, 1500, 'the victim ran to its end');
    assert.equal(events[0].id, 'cmpl-victim-1', 'the client id labels the response as FastDeploy does');
    // Ids the server makes are random, not a counter.
    const ids = [];
    for (let i = 0; i < 3; ++i) {
      ids.push((await (await postJson(server.baseURL, '/v1/completions', { prompt: 'x', max_tokens: 1 })).json()).id);
    }
    for (const id of ids) assert.match(id, /^cmpl-[0-9a-f]{32}$/);
    assert.equal(new Set(ids).size, 3);
  } finally {
    await server.stop();
  }
});

test('a huge batch counts as many requests and cannot starve another client', { timeout: 120000 }, async () => {
  const server = await startServer(['--max-num-seqs', '4']);
  try {
    const tooMany = await postJson(server.baseURL, '/v1/completions',
                                   { prompt: Array(150000).fill('a'), max_tokens: 1 });
    assert.equal(tooMany.status, 400);
    assert.match((await tooMany.json()).error.message, /the limit is 128/);
    assert.ok(await smallFinishesFirst(server.baseURL,
                                       { prompt: Array(128).fill('And the earth'), max_tokens: 60, ignore_eos: true },
                                       { prompt: 'Let there be', max_tokens: 8 }),
              'the lone request finished before the batch');
  } finally {
    await server.stop();
  }
  const limited = await startServer(['--max-concurrency', '10']);
  try {
    const response = await postJson(limited.baseURL, '/v1/completions', { prompt: Array(11).fill('a'), max_tokens: 1 });
    assert.equal(response.status, 429, 'every prompt of a batch counts against --max-concurrency');
  } finally {
    await limited.stop();
  }
});

test('a non-streamed request whose client left is aborted', { timeout: 120000 }, async () => {
  const server = await startServer(['--max-model-len', '4096'], {}, { maxModelLen: null });
  try {
    const controller = new AbortController();
    const pending = postJson(server.baseURL, '/v1/completions',
                             { prompt: Array(16).fill('In the beginning'), max_tokens: 4000, ignore_eos: true },
                             { signal: controller.signal }).catch(() => null);
    await waitRunning(server.baseURL);
    controller.abort();
    await pending;
    await waitIdle(server.baseURL, 10000);
    await sleep(100);
    const line = server.output().split('\n').find((text) => text.includes('(client disconnected)'));
    assert.ok(line, server.output());
    const generated = Number(line.match(/completion_tokens=(\d+)/)[1]);
    assert.ok(generated < 16 * 4000, `stopped early: ${generated} tokens`);
  } finally {
    await server.stop();
  }
});

test('a long prefill does not hold back a short request sent after it', { timeout: 120000 }, async () => {
  const server = await startServer(['--max-model-len', '8192', '--max-num-batched-tokens', '64'], {},
                                   { maxModelLen: null });
  try {
    const ids = Array.from({ length: 7000 }, (_, i) => 10 + (i * 7919) % 4000);
    assert.ok(await smallFinishesFirst(server.baseURL, { prompt: ids, max_tokens: 1 }, { prompt: 'Let', max_tokens: 4 }),
              'the short request finished while the long prompt was still prefilling');
  } finally {
    await server.stop();
  }
});

test('right status codes: OOV ids, unsupported fields, control characters, an empty --api-key', { timeout: 120000 },
  async () => {
    const server = await startServer([]);
    try {
      const oov = await postJson(server.baseURL, '/v1/completions', { prompt: [5, 999999], max_tokens: 2, stream: true });
      assert.equal(oov.status, 400, 'refused before the stream starts');
      assert.match((await oov.json()).error.message, /outside the vocabulary/);
      const chatOov = await postJson(server.baseURL, '/v1/chat/completions',
                                     { messages: user, prompt_token_ids: [999999], stream: true });
      assert.equal(chatOov.status, 400);
      for (const extra of [{ guided_json: 5 }, { response_format: { type: 'xml' } }, { guided_regex: '(?=a)' },
                           { guided_choice: [] }, { guided_regex: 'a{10000}{10000}' }]) {
        const response = await postJson(server.baseURL, '/v1/chat/completions', { messages: user, stream: true, ...extra });
        assert.equal(response.status, 400, JSON.stringify(extra));
        assert.equal((await response.json()).error.param, Object.keys(extra)[0]);
      }
      const forged = await postJson(server.baseURL, '/v1/completions',
                                    { prompt: 'x', max_tokens: 1, request_id: 'a\n2026-01-01 INFO forged' });
      assert.equal(forged.status, 400);
      assert.ok(!server.output().split('\n').some((line) => line.startsWith('2026-01-01 INFO forged')));
    } finally {
      await server.stop();
    }
    const refused = spawnSync(process.env.ERNIE_BINARY, ['serve', '--model', process.env.ERNIE_E2E_MODEL,
                                                         '--api-key', '', '--port', '0'], { encoding: 'utf8' });
    assert.notEqual(refused.status, 0);
    assert.match(refused.stderr + refused.stdout, /--api-key must not be empty/);
  });

// A copy of the model whose final norm is NaN: every step fails inside the engine.
function nanCopy(modelDir) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ernie-nan-'));
  for (const name of fs.readdirSync(modelDir)) fs.copyFileSync(path.join(modelDir, name), path.join(dir, name));
  const file = path.join(dir, 'model.safetensors');
  const bytes = fs.readFileSync(file);
  const headerLength = Number(bytes.readBigUInt64LE(0));
  const header = JSON.parse(bytes.subarray(8, 8 + headerLength).toString('utf8'));
  const [begin, end] = header['model.norm.weight'].data_offsets;
  const dataStart = 8 + headerLength;
  for (let at = dataStart + begin; at < dataStart + end; at += 2) bytes.writeUInt16LE(0x7fc0, at);  // bf16 NaN
  fs.writeFileSync(file, bytes);
  return dir;
}

test('an engine failure is a 500 server_error, streamed or not', { timeout: 120000 }, async () => {
  const dir = nanCopy(process.env.ERNIE_E2E_MODEL);
  const server = await startServer([], {}, { model: dir });
  try {
    const response = await postJson(server.baseURL, '/v1/completions', { prompt: 'x', max_tokens: 2 });
    assert.equal(response.status, 500);
    assert.equal((await response.json()).error.type, 'server_error');
    const streamed = await readEvents(await postJson(server.baseURL, '/v1/completions',
                                                     { prompt: 'x', max_tokens: 2, stream: true }));
    assert.equal(streamed.at(-1).error.code, 500);
    await waitIdle(server.baseURL);
  } finally {
    await server.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
