// What the reliability tests share: the server launcher of the end-to-end tests, the
// official OpenAI client installed there, and small probes of a running server.
import { createRequire } from 'node:module';
import fs from 'node:fs';

export { startServer } from '../e2e/server.mjs';

// The client pinned by tests/e2e/package-lock.json (installed by scripts/test.sh).
export const OpenAI = createRequire(new URL('../e2e/package.json', import.meta.url))('openai').default;

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export async function postJson(baseURL, path, body, init = {}) {
  return fetch(`${baseURL}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
    ...init,
  });
}

// One /health round trip, in milliseconds.
export async function healthMs(baseURL) {
  const start = performance.now();
  const response = await fetch(`${baseURL}/health`);
  await response.arrayBuffer();
  if (response.status !== 200) throw new Error(`/health answered ${response.status}`);
  return performance.now() - start;
}

// Probes /health every 50 ms until `work` settles; returns the work's result and every
// latency seen (at least three probes, so a fast `work` still gets measured).
export async function healthDuring(baseURL, work) {
  const latencies = [];
  let settled = false;
  const guarded = work.finally(() => { settled = true; });
  while (!settled || latencies.length < 3) {
    latencies.push(await healthMs(baseURL));
    await sleep(50);
  }
  return { result: await guarded, latencies };
}

export function percentile(values, share) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(share * sorted.length))];
}

export async function metrics(baseURL) {
  const text = await (await fetch(`${baseURL}/metrics`)).text();
  const value = (name) => Number(text.match(new RegExp(`^${name} (\\S+)$`, 'm'))[1]);
  return {
    running: value('fastdeploy:num_requests_running'),
    waiting: value('fastdeploy:num_requests_waiting'),
    blocksTotal: value('fastdeploy:max_gpu_block_num'),
    blocksFree: value('fastdeploy:free_gpu_block_num'),
    kvResidentBytes: value('ernie_kv_cache_resident_bytes'),
  };
}

// Waits until the engine runs something.
export async function waitRunning(baseURL, timeoutMs = 20000) {
  const deadline = Date.now() + timeoutMs;
  while ((await metrics(baseURL)).running === 0) {
    if (Date.now() > deadline) throw new Error('nothing started running');
    await sleep(5);
  }
}

// Waits until the engine is idle with every KV block free; returns the last reading.
export async function waitIdle(baseURL, timeoutMs = 30000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const reading = await metrics(baseURL);
    if (reading.running === 0 && reading.waiting === 0 && reading.blocksFree === reading.blocksTotal) return reading;
    if (Date.now() > deadline) throw new Error(`the server did not go idle: ${JSON.stringify(reading)}`);
    await sleep(20);
  }
}

// Resident memory of a process, in bytes.
export function rssBytes(pid) {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(status.match(/^VmRSS:\s+(\d+) kB$/m)[1]) * 1024;
}

// A server's resident memory less its KV pool's: the pool is reserved at start and enters
// RAM block by block as the prefix cache first uses each one, up to its fixed size, so
// it grows over a long run without being a leak.
export async function rssBesideKvPool(server) {
  const { kvResidentBytes } = await metrics(server.baseURL);
  return rssBytes(server.pid) - kvResidentBytes;
}

// Reads a server-sent-event stream to its end; returns the parsed data events.
export async function readEvents(response) {
  const text = await response.text();
  return text.split('\n\n').filter((event) => event.startsWith('data: ')).map((event) => event.slice(6))
    .filter((data) => data !== '[DONE]').map((data) => JSON.parse(data));
}
