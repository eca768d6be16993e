// Prefill/decode disaggregation end to end (issue 19): `ernie serve` processes started
// with the 21B-A3B guide's 1P1D flags (less --tensor-parallel-size and --max-model-len,
// which the shipped model cannot take), on the shipped trained model. Clients talk to
// the decode instance; its answers, streamed or not, must be exactly the mixed
// instance's, also when the prefill instance it chose is killed mid-request.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import OpenAI from 'openai';
import { scratchDir } from './scratch.mjs';
import { freePort, startServer } from './server.mjs';

// The instances' ipc sockets go in a directory of this run, removed at its end: an
// instance this file kills cannot remove its own.
process.env.TMPDIR = scratchDir('ernie-pd-');

const shipped = { model: null, maxModelLen: null };
const logRoot = process.env.ERNIE_E2E_LOG_DIR ?? '/tmp/ernie-e2e-logs';
const common = ['--max-num-seqs', '20', '--quantization', 'block_wise_fp8', '--cache-queue-port', '0'];

async function listening(server) {
  for (let i = 0; i < 600 && !/serving \S+ on http/.test(server.output()); ++i) await new Promise((r) => setTimeout(r, 100));
  return server;
}

async function prefillInstance(name) {
  const queuePort = await freePort();
  const server = await listening(await startServer(
    [...common, '--num-gpu-blocks-override', '4000', '--gpu-memory-utilization', '0.9', '--kv-cache-ratio', '0.9',
     '--engine-worker-queue-port', String(queuePort), '--splitwise-role', 'prefill'],
    { INFERENCE_MSG_QUEUE_ID: '1315', FD_ATTENTION_BACKEND: 'FLASH_ATTN', FD_LOG_DIR: `${logRoot}/${name}` }, shipped));
  return { server, queuePort };
}

async function decodeInstance(queuePorts, env = {}) {
  const server = await listening(await startServer(
    [...common, '--gpu-memory-utilization', '0.85', '--kv-cache-ratio', '0.1',
     '--engine-worker-queue-port', String(await freePort()), '--innode-prefill-ports', queuePorts.join(','),
     '--splitwise-role', 'decode'],
    { INFERENCE_MSG_QUEUE_ID: '1215', FD_LOG_DIR: `${logRoot}/decode`, ...env }, shipped));
  // The first status round from every prefill instance (at most 10 s: an unreachable one
  // never reports). Tests that count on which instance takes a task need all of them
  // known: with only some reported, the task goes to one of those.
  const allUp = () => queuePorts.every((port) => new RegExp(`prefill instance \\S+-${port}\\.ipc is up`).test(server.output()));
  for (let i = 0; i < 100 && !allUp(); ++i) await new Promise((r) => setTimeout(r, 100));
  return server;
}

const prompts = ['And God said', 'In the beginning God created the heaven and the earth. And the earth was',
                 'The LORD is my shepherd; I shall not want. He maketh me to lie down in green pastures'];

// The requests whose keys and values a decode instance received (from one prefill
// instance's port, when given).
function transferred(decode, port = '\\d+') {
  const lines = decode.output().matchAll(new RegExp(`request (\\S+): \\d+ positions' keys and values .* from ipc:\\S+-${port}\\.ipc`, 'g'));
  return new Set([...lines].map((match) => match[1]));
}

async function completion(server, prompt) {
  const client = new OpenAI({ apiKey: 'unused', baseURL: `${server.baseURL}/v1` });
  const answer = await client.completions.create({ model: 'default', prompt, max_tokens: 24, temperature: 0 });
  return answer.choices[0].text;
}

async function answers(server) {
  const client = new OpenAI({ apiKey: 'unused', baseURL: `${server.baseURL}/v1` });
  const out = await Promise.all(prompts.map((prompt) => completion(server, prompt)));
  const chat = await client.chat.completions.create({ model: 'default', temperature: 0, max_tokens: 20, stream: true,
                                                      messages: [{ role: 'user', content: 'Who made the heaven?' }] });
  let streamed = '';
  for await (const chunk of chat) streamed += chunk.choices[0]?.delta?.content ?? '';
  out.push(streamed);
  return out;
}

let expected;
test('the mixed reference', { timeout: 120000 }, async () => {
  const mixed = await listening(await startServer(common, { FD_LOG_DIR: `${logRoot}/mixed` }, shipped));
  try {
    expected = await answers(mixed);
    expected.push(await completion(mixed, 'Thou shalt'));
  } finally {
    assert.equal(await mixed.stop(), 0);
  }
});

test('1P1D with the seed flags answers exactly what a mixed instance answers, streamed and not', { timeout: 180000 }, async () => {
  const prefill = await prefillInstance('prefill');
  const decode = await decodeInstance([prefill.queuePort]);
  try {
    assert.deepEqual(await answers(decode), expected.slice(0, 4));
    assert.equal(transferred(decode).size, 4, decode.output());
    // The prefill instance holds nothing once its tasks are done.
    const metrics = await (await fetch(`${prefill.server.baseURL}/metrics`)).text();
    assert.match(metrics, /num_requests_running 0\n/);
  } finally {
    assert.equal(await decode.stop(), 0);
    assert.equal(await prefill.server.stop(), 0);
  }
});

test('an int8 KV cache moves with its per-head scales: 1P1D still equals mixed', { timeout: 180000 }, async () => {
  const int8 = ['--quantization', '{"quantization":"mix_quant","dense_quant_type":"wint8","moe_quant_type":"wint8","kv_cache_quant_type":"int8"}'];
  const mixed = await listening(await startServer(['--max-num-seqs', '20', ...int8], { FD_LOG_DIR: `${logRoot}/mixed-int8` }, shipped));
  let reference;
  try {
    reference = await Promise.all(prompts.map((prompt) => completion(mixed, prompt)));
  } finally {
    assert.equal(await mixed.stop(), 0);
  }
  const queuePort = await freePort();
  const prefill = await listening(await startServer(
    ['--max-num-seqs', '20', ...int8, '--engine-worker-queue-port', String(queuePort), '--splitwise-role', 'prefill'],
    { FD_LOG_DIR: `${logRoot}/prefill-int8` }, shipped));
  const decode = await listening(await startServer(
    ['--max-num-seqs', '20', ...int8, '--innode-prefill-ports', String(queuePort), '--splitwise-role', 'decode'],
    { FD_LOG_DIR: `${logRoot}/decode-int8` }, shipped));
  try {
    for (let i = 0; i < 50 && !/prefill instance .* is up/.test(decode.output()); ++i) await new Promise((r) => setTimeout(r, 100));
    assert.match(decode.output(), /KV layers of 136-byte rows/);  // 128 int8 values, then 2 float scales
    assert.deepEqual(await Promise.all(prompts.map((prompt) => completion(decode, prompt))), reference);
    assert.equal(transferred(decode).size, prompts.length);
  } finally {
    assert.equal(await decode.stop(), 0);
    assert.equal(await prefill.stop(), 0);
  }
});

test('a prefill instance killed mid-request: the task moves to another, then to the decode instance itself', { timeout: 180000 }, async () => {
  const first = await prefillInstance('prefill-1');
  const second = await prefillInstance('prefill-2');
  const decode = await decodeInstance([first.queuePort, second.queuePort]);
  try {
    // Both report the same free seats, so the first listed gets the task; it is frozen
    // as the task arrives and killed while it holds it.
    process.kill(first.server.pid, 'SIGSTOP');
    const pending = completion(decode, prompts[1]);
    await new Promise((r) => setTimeout(r, 300));
    process.kill(first.server.pid, 'SIGKILL');
    assert.equal(await pending, expected[1]);
    assert.match(decode.output(), /attempt 1 on \S+ failed: it fell silent/);
    assert.equal(transferred(decode, second.queuePort).size, 1, decode.output());
    // With no prefill instance left, the decode instance computes the prompt itself.
    await second.server.stop('SIGKILL');
    assert.equal(await completion(decode, 'Thou shalt'), expected[4]);
    assert.match(decode.output(), /is computed here: /);
  } finally {
    assert.equal(await decode.stop(), 0);
    // Neither instance may outlive a failed assertion: a live child keeps the runner waiting.
    await first.server.stop('SIGKILL');
    await second.server.stop('SIGKILL');
  }
});

test('FD_PD_CHANGEABLE=1 serves as mixed when no prefill instance has a free seat; bad settings are refused', { timeout: 120000 }, async () => {
  const unreachable = await freePort();  // nothing listens there
  const decode = await decodeInstance([unreachable], { FD_PD_CHANGEABLE: '1' });
  try {
    assert.equal(await completion(decode, prompts[0]), expected[0]);
  } finally {
    assert.equal(await decode.stop(), 0);
  }
  const refused = (args, reason) => {
    const run = spawnSync(process.env.ERNIE_BINARY, ['serve', ...args], { encoding: 'utf8', timeout: 30000 });
    assert.notEqual(run.status, 0, run.stdout);
    assert.match(run.stdout + run.stderr, reason);
  };
  refused(['--splitwise-role', 'prefill'], /needs --engine-worker-queue-port/);
  refused(['--splitwise-role', 'decode'], /needs --innode-prefill-ports/);
  refused(['--innode-prefill-ports', '7013'], /add --splitwise-role decode/);
  refused(['--splitwise-role', 'decode', '--innode-prefill-ports', 'host:x'], /is not PORT .* or HOST:PORT/);
  refused(['--splitwise-role', 'decode', '--innode-prefill-ports', '7013', '--tensor-parallel-size', '2'],
          /with --tensor-parallel-size 2 is not supported/);
});

// Across machines: `ernie router` with instances registered by --router (one machine
// here, over TCP and the router's HTTP as between machines).
async function startRouter() {
  const port = await freePort();
  const child = spawn(process.env.ERNIE_BINARY, ['router', '--host', '127.0.0.1', '--port', String(port), '--splitwise'],
                      { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (data) => { output += data.toString(); });
  child.stderr.on('data', (data) => { output += data.toString(); });
  const exited = new Promise((resolve) => child.once('exit', (code) => resolve(code)));
  for (let i = 0; i < 100 && !output.includes('router on'); ++i) await new Promise((r) => setTimeout(r, 50));
  assert.match(output, /router on/);
  return { port, baseURL: `http://127.0.0.1:${port}`, output: () => output, stop: () => { child.kill('SIGTERM'); return exited; } };
}

test('ernie router: instances register with --router and requests to the router come back as a mixed instance answers', { timeout: 180000 }, async () => {
  const router = await startRouter();
  const routerFlag = ['--router', `127.0.0.1:${router.port}`];
  const prefill = await listening(await startServer(
    [...common, '--engine-worker-queue-port', String(await freePort()), '--splitwise-role', 'prefill', ...routerFlag],
    { FD_LOG_DIR: `${logRoot}/router-prefill` }, shipped));
  const decode = await listening(await startServer(
    [...common, '--splitwise-role', 'decode', ...routerFlag], { FD_LOG_DIR: `${logRoot}/router-decode` }, shipped));
  try {
    for (let i = 0; i < 100 && !/prefill instance tcp:\S+ is up/.test(decode.output()); ++i) await new Promise((r) => setTimeout(r, 100));
    const registered = await (await fetch(`${router.baseURL}/registered`)).json();
    assert.deepEqual(registered.instances.map((instance) => instance.role).sort(), ['decode', 'prefill']);
    assert.deepEqual(await answers(router), expected.slice(0, 4));
    assert.equal(transferredOverTcp(decode), 4, decode.output());
    // A bad registration is refused with the reason.
    const bad = await fetch(`${router.baseURL}/register`, { method: 'POST', body: '{"role":"prefill","port":1}' });
    assert.equal(bad.status, 400);
    assert.match((await bad.json()).error.message, /engine_worker_queue_port/);
    // With the decode instance gone, the router says so instead of hanging.
    assert.equal(await decode.stop(), 0);
    const orphaned = await fetch(`${router.baseURL}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ prompt: 'x', max_tokens: 2 }) });
    assert.ok([502, 503].includes(orphaned.status), String(orphaned.status));
  } finally {
    await decode.stop();
    assert.equal(await prefill.stop(), 0);
    assert.equal(await router.stop(), 0);
  }
  const splitwise = spawnSync(process.env.ERNIE_BINARY, ['serve', '--scheduler-name', 'splitwise', '--scheduler-host', 'redis'],
                              { encoding: 'utf8', timeout: 30000 });
  assert.notEqual(splitwise.status, 0);
  assert.match(splitwise.stderr, /Redis "splitwise" scheduler is not supported; start `ernie router`/);
});

function transferredOverTcp(decode) {
  const lines = decode.output().matchAll(/request (\S+): \d+ positions' keys and values .* from tcp:/g);
  return new Set([...lines].map((match) => match[1])).size;
}
