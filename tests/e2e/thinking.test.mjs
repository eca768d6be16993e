// ERNIE-4.5-21B-A3B-Thinking's serving contract through the official OpenAI client:
// reasoning_content, tool_calls, tools and tool history rendered by the template, the
// thinking budget. Answers with markers come from the scripted test server (the real
// server over a model that replays written answers); the seed command itself runs
// `ernie serve` on the golden tiny-thinking checkpoint (Thinking layout and markers).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import { scratchDir } from './scratch.mjs';
import { startServer } from './server.mjs';

const thinkingModel = process.env.ERNIE_THINKING_MODEL;
const scriptedServer = process.env.ERNIE_SCRIPTED_SERVER;
const parsers = ['--reasoning-parser', 'ernie_x1', '--tool-call-parser', 'ernie_x1'];

const weatherCall = '{"name": "get_weather", "arguments": {"city": "Paris"}}';
const scripts = [
  // After the tool ran: the history must have been rendered with the call and its result.
  { when: [`<tool_call>\n{"name": "get_weather", "arguments": {"city":"Paris"}}\n</tool_call>`,
           '<|im_start|>tool\n21 C and sunny<|im_end|>'],
    reply: 'The tool answered.\n</think>\n\n<response>\nIt is 21 C and sunny in Paris.\n</response>\n' },
  // Before 'weather': the rendered tools mention get_weather.
  { when: ['broken'],
    reply: 'Calling.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": }\n</tool_call>\n' },
  { when: ['weather'],
    reply: `The user wants the weather.\nI will call the tools.\n</think>\n\n<tool_call>\n${weatherCall}\n</tool_call>\n` +
           '<tool_call>\n{"name": "get_time", "arguments": {"zone": "CET"}}\n</tool_call>\n' },
  { when: ['capital'],
    reply: 'Paris is a city.\nIt is in France.\n</think>\n\n<response>\nThe capital of France is Paris.\n\nIt is large.\n</response>\n' },
];

const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather in a city',
                                   parameters: { type: 'object', properties: { city: { type: 'string' } } } } },
  { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: { zone: { type: 'string' } } } } },
];

let server;
let client;

before(async () => {
  const dir = scratchDir('ernie-scripts-');
  const scriptFile = path.join(dir, 'script.json');
  writeFileSync(scriptFile, JSON.stringify({ answer_start: '<|im_start|>assistant\n<think>\n', end: '<|im_end|>', scripts }));
  server = await startServer(parsers, {}, { command: [scriptedServer, scriptFile], model: thinkingModel });
  client = new OpenAI({ apiKey: 'unused', baseURL: `${server.baseURL}/v1` });
});

after(async () => {
  assert.equal(await server.stop(), 0);
});

const ask = (content, extra = {}) => ({ model: 'default', messages: [{ role: 'user', content }], ...extra });

// Streams a request and puts the deltas back together the way an agent would.
async function streamed(request) {
  const stream = await client.chat.completions.create({ ...request, stream: true, stream_options: { include_usage: true } });
  const result = { reasoning: '', content: '', calls: [], finish: null, usage: null, deltas: [] };
  for await (const chunk of stream) {
    if (chunk.usage) result.usage = chunk.usage;
    for (const choice of chunk.choices) {
      const delta = choice.delta;
      result.deltas.push(delta);
      result.reasoning += delta.reasoning_content ?? '';
      result.content += delta.content ?? '';
      for (const call of delta.tool_calls ?? []) {
        const slot = (result.calls[call.index] ??= { id: '', name: '', arguments: '' });
        slot.id += call.id ?? '';
        slot.name += call.function?.name ?? '';
        slot.arguments += call.function?.arguments ?? '';
      }
      if (choice.finish_reason) result.finish = choice.finish_reason;
    }
  }
  return result;
}

test('reasoning and answer are split, streamed or not, however the deltas are cut', async () => {
  const whole = await client.chat.completions.create(ask('What is the capital of France?'));
  const message = whole.choices[0].message;
  assert.equal(message.reasoning_content, 'Paris is a city.\nIt is in France.');
  assert.equal(message.content, 'The capital of France is Paris.\n\nIt is large.');
  assert.equal(message.tool_calls, undefined);
  assert.equal(whole.choices[0].finish_reason, 'stop');
  const reasoningTokens = whole.usage.completion_tokens_details.reasoning_tokens;
  assert.ok(reasoningTokens > 5 && reasoningTokens < whole.usage.completion_tokens, `reasoning_tokens ${reasoningTokens}`);

  for (const perChunk of [1, 2, 3, 5]) {
    const parts = await streamed(ask('What is the capital of France?', { max_streaming_response_tokens: perChunk }));
    assert.equal(parts.reasoning, message.reasoning_content, `${perChunk} tokens per chunk`);
    assert.equal(parts.content, message.content, `${perChunk} tokens per chunk`);
    assert.equal(parts.finish, 'stop');
    assert.equal(parts.usage.completion_tokens_details.reasoning_tokens, reasoningTokens);
    for (const delta of parts.deltas) {
      for (const text of [delta.reasoning_content ?? '', delta.content ?? ''])
        assert.ok(!/<\/?(think|response|tool_call)>/.test(text), `a marker leaked: ${JSON.stringify(delta)}`);
    }
  }
});

test('tool calls come back as tool_calls with finish_reason tool_calls', async () => {
  const whole = await client.chat.completions.create(ask('What is the weather in Paris?', { tools }));
  const message = whole.choices[0].message;
  assert.equal(whole.choices[0].finish_reason, 'tool_calls');
  assert.equal(message.reasoning_content, 'The user wants the weather.\nI will call the tools.');
  assert.equal(message.content, null);
  assert.equal(message.tool_calls.length, 2);
  assert.deepEqual(message.tool_calls.map((call) => [call.type, call.function.name, JSON.parse(call.function.arguments)]),
                   [['function', 'get_weather', { city: 'Paris' }], ['function', 'get_time', { zone: 'CET' }]]);
  for (const call of message.tool_calls) assert.match(call.id, /^chatcmpl-tool-[0-9a-f]{32}$/);
  assert.notEqual(message.tool_calls[0].id, message.tool_calls[1].id);

  for (const perChunk of [1, 4]) {
    const parts = await streamed(ask('What is the weather in Paris?', { tools, max_streaming_response_tokens: perChunk }));
    assert.equal(parts.finish, 'tool_calls');
    assert.equal(parts.reasoning, message.reasoning_content);
    assert.equal(parts.content, '');
    assert.deepEqual(parts.calls.map((call) => [call.name, call.arguments]),
                     message.tool_calls.map((call) => [call.function.name, call.function.arguments]));
    for (const call of parts.calls) assert.match(call.id, /^chatcmpl-tool-[0-9a-f]{32}$/);
  }
});

test('the tool round trip: assistant tool_calls and tool results are rendered into the next prompt', async () => {
  const first = await client.chat.completions.create(ask('What is the weather in Paris?', { tools }));
  const call = first.choices[0].message.tool_calls[0];
  const messages = [
    { role: 'user', content: 'What is the weather in Paris?' },
    { role: 'assistant', content: null, reasoning_content: first.choices[0].message.reasoning_content, tool_calls: [call] },
    { role: 'tool', tool_call_id: call.id, content: '21 C and sunny' },
  ];
  const second = await client.chat.completions.create({ model: 'default', messages, tools });
  // The scripted model only gives this answer when it saw the call and the result.
  assert.equal(second.choices[0].message.content, 'It is 21 C and sunny in Paris.');
  assert.equal(second.choices[0].message.reasoning_content, 'The tool answered.');
  assert.equal(second.choices[0].finish_reason, 'stop');
});

test('malformed tool JSON comes back as content, nothing lost', async () => {
  const whole = await client.chat.completions.create(ask('a broken call please', { tools }));
  const message = whole.choices[0].message;
  assert.equal(message.tool_calls, undefined);
  assert.equal(message.content, '<tool_call>\n{"name": "get_weather", "arguments": {"city": }\n</tool_call>');
  assert.equal(whole.choices[0].finish_reason, 'stop');
  const parts = await streamed(ask('a broken call please', { tools, max_streaming_response_tokens: 2 }));
  assert.equal(parts.content, message.content);
  assert.equal(parts.calls.length, 0);
});

test('tool_choice none leaves calls as text; required and named choices force calls', async () => {
  const none = await client.chat.completions.create(ask('What is the weather in Paris?', { tools, tool_choice: 'none' }));
  assert.equal(none.choices[0].message.tool_calls, undefined);
  assert.match(none.choices[0].message.content, /^<tool_call>\n\{"name": "get_weather"/);
  assert.equal(none.choices[0].finish_reason, 'stop');
  // The script's two calls are what "required" allows, so they come back unchanged.
  const required = await client.chat.completions.create(ask('What is the weather in Paris?', { tools, tool_choice: 'required' }));
  assert.deepEqual(required.choices[0].message.tool_calls.map((call) => call.function.name), ['get_weather', 'get_time']);
  assert.equal(required.choices[0].message.reasoning_content, 'The user wants the weather.\nI will call the tools.');
  // Named: one call of that function; the script's second call is cut off by the grammar.
  const named = await client.chat.completions.create(ask('What is the weather in Paris?', {
    tools, tool_choice: { type: 'function', function: { name: 'get_weather' } } }));
  assert.equal(named.choices[0].message.tool_calls.length, 1);
  assert.equal(named.choices[0].message.tool_calls[0].function.name, 'get_weather');
  assert.deepEqual(JSON.parse(named.choices[0].message.tool_calls[0].function.arguments), { city: 'Paris' });
  await assert.rejects(client.chat.completions.create(ask('weather?', { tools, tool_choice: { type: 'function', function: { name: 'nope' } } })),
                       (error) => error.status === 400 && error.param === 'tool_choice');
  await assert.rejects(client.chat.completions.create(ask('weather?', { tools: [{ type: 'function' }] })),
                       (error) => error.status === 400 && error.param === 'tools');
});

test('reasoning_max_tokens forces </think> when the budget runs out', async () => {
  const whole = await client.chat.completions.create(ask('What is the capital of France?', { reasoning_max_tokens: 2 }));
  assert.equal(whole.usage.completion_tokens_details.reasoning_tokens, 2);
  assert.ok(whole.choices[0].message.reasoning_content.length > 0);
  assert.ok('Paris is a city.'.startsWith(whole.choices[0].message.reasoning_content));
  assert.equal(whole.choices[0].message.content, 'The capital of France is Paris.\n\nIt is large.');
  const parts = await streamed(ask('What is the capital of France?', { reasoning_max_tokens: 2 }));
  assert.equal(parts.reasoning, whole.choices[0].message.reasoning_content);
  assert.equal(parts.content, whole.choices[0].message.content);
  await assert.rejects(client.chat.completions.create(ask('capital?', { reasoning_max_tokens: 0 })),
                       (error) => error.status === 400 && error.param === 'reasoning_max_tokens');
});

test('the Thinking seed command starts on a checkpoint of that layout and answers with reasoning_content', async () => {
  const seed = await startServer(['--load_choices', 'default_v1', '--tensor-parallel-size', '1', '--quantization', 'wint8',
                                  ...parsers, '--max-num-seqs', '32'],
                                 {}, { model: thinkingModel, maxModelLen: 131072 });
  try {
    const seedClient = new OpenAI({ apiKey: 'unused', baseURL: `${seed.baseURL}/v1` });
    const request = ask('Hello', { max_tokens: 12, temperature: 0, tools });
    const whole = await seedClient.chat.completions.create(request);
    const message = whole.choices[0].message;
    // Random weights: whatever it says is reasoning until it happens to close </think>.
    assert.equal(typeof message.reasoning_content, 'string');
    assert.equal(typeof whole.usage.completion_tokens_details.reasoning_tokens, 'number');
    const stream = await seedClient.chat.completions.create({ ...request, stream: true });
    let reasoning = '';
    let content = '';
    for await (const chunk of stream) {
      reasoning += chunk.choices[0]?.delta?.reasoning_content ?? '';
      content += chunk.choices[0]?.delta?.content ?? '';
    }
    assert.equal(reasoning, message.reasoning_content);
    assert.equal(content, message.content ?? '');
    assert.match(seed.output(), /markers <think>=13, <\/think>=14, <response>=15, <\/response>=16, <tool_call>=17, <\/tool_call>=18/);
  } finally {
    assert.equal(await seed.stop(), 0);
  }
});

test('parsers refuse to start on a vocabulary without their markers, or under an unknown name', async () => {
  await assert.rejects(startServer(['--reasoning-parser', 'ernie_x1']), /needs "<think>" to be a single token/);
  await assert.rejects(startServer(['--tool-call-parser', 'ernie_x1']), /needs "<tool_call>" to be a single token/);
  await assert.rejects(startServer(['--reasoning-parser', 'deepseek_r1']), /valid: ernie_x1, ernie-x1, ernie-45-vl/);
  await assert.rejects(startServer(['--tool-call-parser', 'hermes']), /valid: ernie_x1, ernie-x1/);
});
