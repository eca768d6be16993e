// FastDeploy's logprob extras, its control endpoints and its load controls (issue 13,
// items 4 and 7): prompt_logprobs, temp_scaled_logprobs / top_p_normalized_logprobs,
// --max-logprobs; /v1/pause, /v1/resume, /v1/is_paused; --max-waiting-time; early stop.
// Logprobs run on the real model; the others on the scripted server, whose answers (and
// their pace) are known.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { scratchDir } from './scratch.mjs';
import { startServer } from './server.mjs';

const LOWEST_FLOAT = -3.4028234663852886e38;
const reply = Array.from({ length: 60 }, (_, i) => `word${i}`).join(' ');

let model;    // tiny-dense, --enable-logprob --max-logprobs -1
let plain;    // tiny-dense, --enable-logprob with the default --max-logprobs 20
let slow;     // scripted: 30 ms a step, one seat, --max-waiting-time 0.3
let stopper;  // scripted: early stop after 5 confident tokens

function scriptedLaunch(stepDelayMs) {
  const dir = scratchDir('ernie-scripts-');
  const file = path.join(dir, 'script.json');
  writeFileSync(file, JSON.stringify({ answer_start: 'Assistant: ', step_delay_ms: stepDelayMs,
                                       scripts: [{ when: [], reply }] }));
  return { command: [process.env.ERNIE_SCRIPTED_SERVER, file] };
}

before(async () => {
  model = await startServer(['--enable-logprob', '--max-logprobs', '-1']);
  plain = await startServer(['--enable-logprob']);
  slow = await startServer(['--max-num-seqs', '1', '--max-waiting-time', '0.3'], {}, scriptedLaunch(30));
  stopper = await startServer(['--early-stop-config', '{"enable_early_stop": true, "window_size": 5, "threshold": 0.9}'],
                              {}, scriptedLaunch(0));
});
after(async () => {
  for (const server of [model, plain, slow, stopper]) assert.equal(await server?.stop(), 0);
});

const post = (server, route, body) => fetch(`${server.baseURL}${route}`, {
  method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
});
const prompt = [300, 301, 302, 303, 304, 305, 306];

test('prompt_logprobs: null first, then each prompt token with its rank, matching the logprobs of a shorter prompt', async () => {
  const body = await (await post(model, '/v1/completions',
                                 { prompt_token_ids: prompt, prompt_logprobs: 3, max_tokens: 1 })).json();
  const scored = body.choices[0].prompt_logprobs;
  assert.equal(scored.length, prompt.length);
  assert.equal(scored[0], null);
  for (let j = 1; j < prompt.length; ++j) {
    const entries = scored[j];
    const own = entries[String(prompt[j])];
    assert.ok(own && own.rank >= 1 && typeof own.decoded_token === 'string', `position ${j}`);
    const ranks = Object.values(entries).map((entry) => entry.rank).sort((a, b) => a - b);
    assert.deepEqual(ranks.slice(0, 3), [1, 2, 3]);
    // The same distribution, as the next-token logprobs of the prompt cut before j (the
    // whole vocabulary, most likely first, so rank r is entry r - 1).
    const cut = await (await post(model, '/v1/chat/completions', {
      messages: [], prompt_token_ids: prompt.slice(0, j), max_tokens: 1, logprobs: true, top_logprobs: -1,
    })).json();
    const ranked = cut.choices[0].logprobs.content[0].top_logprobs;
    // Not bitwise: the attention kernel tiles a 7-token prefill differently from a j-token
    // one (fp32 rounding, ~1e-5), and a one-ulp change in a bf16-rounded activation grows
    // ~2.4x per matmul in this random model (measured up to 2.8e-3). Another row's
    // logprobs differ by whole units.
    for (const entry of Object.values(entries)) assert.ok(Math.abs(entry.logprob - ranked[entry.rank - 1].logprob) < 1e-2);
  }
  const unnamed = await (await post(model, '/v1/completions', {
    prompt_token_ids: prompt, prompt_logprobs: 0, include_logprobs_decode_token: false, max_tokens: 1,
  })).json();
  assert.equal(unnamed.choices[0].prompt_logprobs[1][String(prompt[1])].decoded_token, null);
  assert.equal(Object.keys(unnamed.choices[0].prompt_logprobs[1]).length, 1);
});

test('prompt_logprobs ride on the first generated chunk of a stream, in chat too', async () => {
  const text = await (await post(model, '/v1/chat/completions', {
    messages: [{ role: 'user', content: 'In the beginning' }], prompt_logprobs: 1, max_tokens: 3, ignore_eos: true,
    stream: true,
  })).text();
  const chunks = text.split('\n\n').filter((e) => e.startsWith('data: {')).map((e) => JSON.parse(e.slice(6)));
  const carrying = chunks.filter((chunk) => chunk.choices[0]?.prompt_logprobs);
  assert.equal(carrying.length, 1);
  assert.equal(carrying[0], chunks[1], 'the chunk after the role chunk');
  assert.equal(carrying[0].choices[0].prompt_logprobs[0], null);
  const whole = await (await post(model, '/v1/chat/completions', {
    messages: [{ role: 'user', content: 'In the beginning' }], prompt_logprobs: 1, max_tokens: 2,
  })).json();
  assert.deepEqual(whole.choices[0].prompt_logprobs, carrying[0].choices[0].prompt_logprobs);
  const none = await (await post(model, '/v1/chat/completions', { messages: [], prompt_token_ids: prompt, max_tokens: 1 })).json();
  assert.equal(none.choices[0].prompt_logprobs, null);
});

// FastDeploy's post-processing, computed here from the raw logprobs of the same request.
function fastdeployLogprobs(raw, temperature, topP) {
  const scaled = raw.map((logprob) => logprob / temperature);
  const max = Math.max(...scaled);
  const logZ = max + Math.log(scaled.reduce((sum, value) => sum + Math.exp(value - max), 0));
  const logprobs = scaled.map((value) => value - logZ);
  // Without a nucleus nothing is clipped (summing every probability may round past 1).
  if (topP >= 1) return logprobs;
  let before = 0;
  let kept = 0;
  while (kept < logprobs.length && before <= topP) before += Math.exp(logprobs[kept++]);  // raw is sorted
  return logprobs.map((value, i) => (i < kept ? value - Math.log(before) : LOWEST_FLOAT));
}

test('temp_scaled_logprobs and top_p_normalized_logprobs post-process as FastDeploy does', async () => {
  const request = { messages: [], prompt_token_ids: prompt, max_tokens: 1, temperature: 0.5, top_p: 0.6, seed: 7,
                    logprobs: true, top_logprobs: -1 };
  const raw = (await (await post(model, '/v1/chat/completions', request)).json()).choices[0].logprobs.content[0];
  for (const [scaled, normalised] of [[true, false], [false, true], [true, true]]) {
    const body = await (await post(model, '/v1/chat/completions', {
      ...request, temp_scaled_logprobs: scaled, top_p_normalized_logprobs: normalised,
    })).json();
    const got = body.choices[0].logprobs.content[0];
    assert.equal(got.token, raw.token, 'the logprob settings do not change the draw');
    const expected = fastdeployLogprobs(raw.top_logprobs.map((entry) => entry.logprob), scaled ? 0.5 : 1, normalised ? 0.6 : 1);
    let clipped = 0;
    got.top_logprobs.forEach((entry, i) => {
      if (expected[i] === LOWEST_FLOAT) {
        assert.equal(entry.logprob, LOWEST_FLOAT, `entry ${i}`);
        ++clipped;
      } else {
        assert.ok(Math.abs(entry.logprob - expected[i]) < 1e-3, `entry ${i}: ${entry.logprob} vs ${expected[i]}`);
      }
    });
    assert.equal(clipped > 0, normalised, 'tokens outside the nucleus are clipped, and only then');
  }
});

test('logprob limits answer with FastDeploy\'s messages', async () => {
  const cases = [
    [plain, '/v1/chat/completions', { logprobs: true, top_logprobs: 21 }, 'top_logprobs',
     /Number of top_logprobs requested \(21\) exceeds maximum allowed value \(20\)/],
    [plain, '/v1/completions', { logprobs: 25 }, 'logprobs', /Number of logprobs requested \(25\) exceeds maximum allowed value \(20\)/],
    [slow, '/v1/completions', { prompt_logprobs: 2 }, 'prompt_logprobs', /`enable_logprob` is disabled/],
    [model, '/v1/completions', { prompt_logprobs: -2 }, 'prompt_logprobs', /must be -1 \(the whole vocabulary\) or at least 0/],
  ];
  for (const [server, route, extra, param, message] of cases) {
    const response = await post(server, route, { messages: [], prompt_token_ids: prompt, max_tokens: 1, ...extra });
    assert.equal(response.status, 400, JSON.stringify(extra));
    const { error } = await response.json();
    assert.equal(error.param, param);
    assert.match(error.message, message);
  }
});

const chat = (server, extra = {}) => post(server, '/v1/chat/completions',
                                          { messages: [{ role: 'user', content: 'go' }], max_tokens: 100, ...extra });
const control = async (route, method = 'POST') => {
  const response = await fetch(`${slow.baseURL}${route}`, { method });
  assert.equal(response.status, 200, route);
  return response.json();
};

test('/v1/pause aborts what runs and refuses what comes; /v1/resume admits again', async () => {
  const running = await chat(slow, { stream: true });
  const reader = running.body.getReader();
  const decoder = new TextDecoder();
  let text = '';
  const contentOf = (raw) => raw.split('\n\n').filter((e) => e.startsWith('data: {') && e.endsWith('}'))
    .map((e) => JSON.parse(e.slice(6)).choices[0]?.delta?.content ?? '').join('');
  // Some of the answer first (its first word whole: a token's text can wait for the next).
  while (!contentOf(text).startsWith('word0 ')) text += decoder.decode((await reader.read()).value, { stream: true });
  const paused = await control('/v1/pause');
  assert.equal(paused.status, 'success');
  assert.equal(paused.error_message, 'Success');
  assert.equal(paused.result, null);
  assert.match(paused.request_id, /^control-/);
  for (let part = await reader.read(); !part.done; part = await reader.read()) text += decoder.decode(part.value, { stream: true });
  const chunks = text.split('\n\n').filter((e) => e.startsWith('data: {')).map((e) => JSON.parse(e.slice(6)));
  assert.equal(chunks.at(-1).choices[0].finish_reason, 'abort');
  const content = contentOf(text);
  try {
    assert.ok(content.startsWith('word0 ') && content.length < reply.length, `the text so far is kept: ${content}`);
    assert.deepEqual((await control('/v1/is_paused', 'GET')).result, { is_paused: true });
    const refused = await chat(slow);
    assert.equal(refused.status, 503);
    assert.match((await refused.json()).error.message, /Request is aborted since LLM Engine is paused/);
    assert.equal((await control('/v1/pause')).status, 'success', 'pausing twice is harmless');
  } finally {
    await control('/v1/resume');  // whatever failed, the next tests need a running server
  }
  assert.deepEqual((await control('/v1/is_paused', 'GET')).result, { is_paused: false });
  const served = await (await chat(slow, { max_tokens: 3 })).json();
  assert.equal(served.choices[0].finish_reason, 'length');
  assert.equal((await fetch(`${slow.baseURL}/v1/pause`)).status, 405, 'pause is a POST');
});

test('--max-waiting-time refuses a request that was not admitted in time', async () => {
  // One seat: the first answer (100 tokens at 30 ms) holds it for about three seconds.
  const first = chat(slow);
  await new Promise((resolve) => setTimeout(resolve, 100));
  const second = await chat(slow, { stream: true });
  const events = (await second.text()).split('\n\n').filter((e) => e.startsWith('data: {')).map((e) => JSON.parse(e.slice(6)));
  const failure = events.find((event) => event.error)?.error;
  assert.ok(failure, 'the stream ends with an error event');
  assert.equal(failure.type, 'timeout_error');
  assert.equal(failure.code, 'timeout');
  assert.match(failure.message, /--max-waiting-time 0.3 s/);
  const unstreamed = await chat(slow);
  assert.equal(unstreamed.status, 503, 'not streamed: the status says it');
  assert.equal((await unstreamed.json()).error.type, 'timeout_error');
  assert.equal((await first).status, 200);
});

test('early stop ends a run of confident tokens with the end token (finish_reason stop)', async () => {
  const body = await (await chat(stopper, { max_tokens: 50, return_token_ids: true })).json();
  assert.equal(body.choices[0].finish_reason, 'stop');
  assert.equal(body.usage.completion_tokens, 5);
  assert.ok(reply.startsWith(body.choices[0].message.content), 'the first four tokens of the answer');
  assert.equal(body.choices[0].message.completion_token_ids.length, 5);
});
