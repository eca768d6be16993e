// Serving benchmark: C concurrent streaming clients (the official OpenAI Node client)
// against a running `ernie serve`, each sending requests back to back for a while.
// Reports requests/s, output tokens/s and p50/p99 of TTFT and end-to-end latency.
//   node bench/serving_load.mjs --url http://127.0.0.1:8000 [--clients 64] [--requests 256]
//        [--max-tokens 32] [--prompt "..."]
// Needs the client installed once: npm ci --prefix tests/e2e
import { createRequire } from 'node:module';
import { parseArgs } from 'node:util';

const require = createRequire(new URL('../tests/e2e/package.json', import.meta.url));
const { default: OpenAI } = await import(require.resolve('openai'));

const { values } = parseArgs({ options: {
  url: { type: 'string', default: 'http://127.0.0.1:8000' },
  clients: { type: 'string', default: '64' },
  requests: { type: 'string', default: '256' },
  'max-tokens': { type: 'string', default: '32' },
  prompt: { type: 'string', default: 'Write a short note about the weather.' },
} });
const clients = Number(values.clients), total = Number(values.requests), maxTokens = Number(values['max-tokens']);
const client = new OpenAI({ apiKey: 'bench', baseURL: `${values.url}/v1`, maxRetries: 0, timeout: 600000 });

const latencies = [], ttfts = [];
let next = 0, outputTokens = 0, failures = 0;
async function worker(index) {
  while (next < total) {
    const id = next++;
    const start = performance.now();
    let first = 0;
    try {
      const stream = await client.chat.completions.create({
        model: 'default', max_tokens: maxTokens, temperature: 0, ignore_eos: true, stream: true,
        stream_options: { include_usage: true },
        messages: [{ role: 'user', content: `${values.prompt} (${index}-${id})` }],
      });
      for await (const chunk of stream) {
        if (!first && chunk.choices?.[0]?.delta?.content) first = performance.now();
        if (chunk.usage) outputTokens += chunk.usage.completion_tokens;
      }
      latencies.push(performance.now() - start);
      ttfts.push((first || performance.now()) - start);
    } catch (error) {
      failures++;
      console.error(`request ${id}: ${error.message}`);
    }
  }
}

const percentile = (values, p) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(p / 100 * sorted.length))];
};
const started = performance.now();
await Promise.all(Array.from({ length: clients }, (_, i) => worker(i)));
const seconds = (performance.now() - started) / 1000;
const result = {
  clients, requests: latencies.length, failures, max_tokens: maxTokens, seconds,
  requests_per_s: latencies.length / seconds, output_tokens_per_s: outputTokens / seconds,
  ttft_p50_ms: percentile(ttfts, 50), ttft_p99_ms: percentile(ttfts, 99),
  latency_p50_ms: percentile(latencies, 50), latency_p99_ms: percentile(latencies, 99),
};
console.log(JSON.stringify(result));
