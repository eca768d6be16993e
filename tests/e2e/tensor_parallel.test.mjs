// Tensor parallelism end to end (issue 18): `ernie serve --tensor-parallel-size 2` starts
// its two ranks under mpirun by itself, answers through the OpenAI client exactly what one
// process answers (greedy, the shipped trained model), stops cleanly on SIGTERM, stops
// with an error naming the rank when a rank dies, and refuses a model that does not
// divide over the ranks before loading it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import OpenAI from 'openai';
import { startServer } from './server.mjs';

const shipped = { model: null, maxModelLen: null };

// startServer returns at the first "serving " in the log, which the shipped model's
// "no --model: serving ..." line already holds; rank 0 opens its port a little later.
async function listening(server) {
  for (let i = 0; i < 600 && !/serving \S+ on http/.test(server.output()); ++i) await new Promise((r) => setTimeout(r, 100));
  return server;
}
const prompts = ['And God said', 'In the beginning', 'The LORD is my shepherd'];

async function answers(server) {
  const client = new OpenAI({ apiKey: 'unused', baseURL: `${server.baseURL}/v1` });
  const out = [];
  for (const prompt of prompts) {
    const completion = await client.completions.create({ model: 'default', prompt, max_tokens: 24, temperature: 0 });
    out.push(completion.choices[0].text);
  }
  const chat = await client.chat.completions.create({ model: 'default', temperature: 0, max_tokens: 16, stream: true,
                                                      messages: [{ role: 'user', content: 'Who made the heaven?' }] });
  let streamed = '';
  for await (const chunk of chat) streamed += chunk.choices[0]?.delta?.content ?? '';
  out.push(streamed);
  return out;
}

const childrenOf = (pid) => fs.readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean);

// The ranks on this machine: the children of the mpirun that `ernie serve` started and
// supervises, with their MPI rank.
function ranksOf(pid) {
  return childrenOf(pid).flatMap(childrenOf).map((child) => {
    const env = fs.readFileSync(`/proc/${child}/environ`, 'utf8').split('\0');
    const rank = env.find((entry) => entry.startsWith('OMPI_COMM_WORLD_RANK='));
    return { pid: Number(child), rank: rank ? Number(rank.split('=')[1]) : -1 };
  });
}

test('two ranks answer what one process answers, and stop on SIGTERM', { timeout: 240000 }, async () => {
  const alone = await listening(await startServer([], {}, shipped));
  let expected;
  try {
    expected = await answers(alone);
  } finally {
    assert.equal(await alone.stop(), 0);
  }
  const sharded = await listening(await startServer(['--tensor-parallel-size', '2'], {}, shipped));
  try {
    assert.match(sharded.output(), /starting the ranks with mpirun -np 2/);
    assert.match(sharded.output(), /\[rank 0\] tensor parallelism: rank 0 of 2 holds its shard/);
    assert.deepEqual(await answers(sharded), expected);
  } finally {
    assert.equal(await sharded.stop(), 0, sharded.output());
  }
});

test('a rank that dies stops the server, naming it', { timeout: 120000 }, async () => {
  const server = await listening(await startServer(['--tensor-parallel-size', '2'], {}, shipped));
  const ranks = ranksOf(server.pid);
  const worker = ranks.find((r) => r.rank === 1);
  assert.ok(worker, JSON.stringify(ranks));
  process.kill(worker.pid, 'SIGKILL');
  const code = await Promise.race([server.exited, new Promise((resolve) => setTimeout(() => resolve('hung'), 60000))]);
  assert.notEqual(code, 'hung', 'the server kept running without a rank');
  assert.notEqual(code, 0);
  assert.match(server.output(), /rank 1 .*(exited|signal|killed)|process rank 1/is);
});

test('a model that does not divide over the ranks is refused before it loads', { timeout: 120000 }, () => {
  const run = spawnSync(process.env.ERNIE_BINARY, ['serve', '--tensor-parallel-size', '3', '--port', '0'],
                        { encoding: 'utf8', timeout: 100000 });
  assert.notEqual(run.status, 0);
  assert.match(run.stdout + run.stderr, /num_attention_heads \(8\) does not divide over --tensor-parallel-size 3/);
});
