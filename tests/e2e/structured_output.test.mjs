// Structured output through the official OpenAI client (issue 17): for a corpus of JSON
// schemas, regexes, choices, a grammar, json_object and a structural tag, every output
// the server finishes is checked by an independent validator (python3-jsonschema, Python's
// re; tests/e2e/python/validate_structured.py), on the random golden model and on the
// shipped trained model, streamed and not. Sampling is at temperature 1 with seeds, so
// the constraint, not the model, gives the outputs their shape.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { scratchDir } from './scratch.mjs';
import { startServer } from './server.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const python = process.env.ERNIE_PYTHON3 ?? 'python3';

const person = {
  type: 'object', additionalProperties: false, required: ['name', 'age'],
  properties: { name: { type: 'string', minLength: 1, maxLength: 10 }, age: { type: 'integer', minimum: 0, maximum: 120 } },
};
const order = {
  type: 'object', required: ['id', 'items', 'placed'],
  properties: {
    id: { type: 'string', format: 'uuid' },
    items: { type: 'array', minItems: 1, maxItems: 2,
             items: { type: 'object', required: ['sku', 'qty'],
                      properties: { sku: { type: 'string', pattern: '^[A-Z]{3}-\\d{2}$' },
                                    qty: { type: 'integer', minimum: 1, maximum: 9 } } } },
    placed: { type: 'string', format: 'date' },
    contact: { type: 'string', format: 'email' },
  },
};
const status = {
  type: 'object', required: ['status', 'version', 'value'],
  properties: { status: { enum: ['open', 'closed', null] }, version: { const: 2 },
                value: { anyOf: [{ type: 'integer', minimum: -5, maximum: 5 }, { type: 'boolean' }] } },
};
const tuple = { type: 'array', prefixItems: [{ type: 'string', maxLength: 4 }, { type: 'number' }, { type: 'boolean' }],
                items: false, minItems: 3 };
const tree = {
  $defs: { node: { type: 'object', required: ['v', 'kids'],
                   properties: { v: { type: 'integer', minimum: 0, maximum: 9 },
                                 kids: { type: 'array', maxItems: 2, items: { $ref: '#/$defs/node' } } } } },
  $ref: '#/$defs/node',
};
const stamped = { type: 'object', required: ['at', 'who'],
                  properties: { at: { type: 'string', format: 'date-time' },
                                who: { oneOf: [{ type: 'string', maxLength: 5 }, { type: 'null' }] } } };
const counters = { type: 'object', properties: { on: { type: 'boolean' } },
                   additionalProperties: { type: 'integer', minimum: 0, maximum: 99 } };
const sumTag = { triggers: ['<call='],
                 structures: [{ begin: '<call=sum>', end: '</call>',
                                schema: { type: 'object', required: ['a', 'b'],
                                          properties: { a: { type: 'integer' }, b: { type: 'integer' } } } }] };

// Each case: the request fields that ask for the constraint, and what the validator checks.
const schemaCase = (label, schema, viaResponseFormat) => ({
  label, kind: 'json_schema', constraint: schema,
  fields: viaResponseFormat ? { response_format: { type: 'json_schema', json_schema: { name: label, strict: true, schema } } }
                            : { guided_json: schema },
  chat: viaResponseFormat,
});
const cases = [
  schemaCase('person', person, true),
  schemaCase('order', order, false),
  schemaCase('status', status, true),
  schemaCase('tuple', tuple, false),
  schemaCase('tree', tree, false),
  schemaCase('stamped', stamped, true),
  schemaCase('counters', counters, false),
  { label: 'phone', kind: 'regex', constraint: '\\d{3}-\\d{4}', fields: { guided_regex: '\\d{3}-\\d{4}' } },
  { label: 'animals', kind: 'regex', constraint: '(cat|dog)s? (and|or) (bird|fish)',
    fields: { guided_regex: '(cat|dog)s? (and|or) (bird|fish)' } },
  { label: 'names', kind: 'regex', constraint: '[A-Z][a-z]{1,6}( [A-Z][a-z]{1,6}){0,2}',
    fields: { guided_regex: '[A-Z][a-z]{1,6}( [A-Z][a-z]{1,6}){0,2}' } },
  { label: 'city', kind: 'choice', constraint: ['Paris', 'London', 'New York'],
    fields: { guided_choice: ['Paris', 'London', 'New York'] } },
  { label: 'sum', kind: 'python_regex', constraint: '\\([1-9][0-9]?(\\+[1-9][0-9]?)*\\)',
    fields: { guided_grammar: 'root ::= "(" num ("+" num)* ")"\nnum ::= [1-9] [0-9]?' } },
  { label: 'object', kind: 'json_object', constraint: null, fields: { response_format: { type: 'json_object' } }, chat: true },
  { label: 'tagged', kind: 'structural_tag', constraint: sumTag,
    fields: { structural_tag: JSON.stringify(sumTag) }, maxTokens: 60 },
];

async function generate(client, c, seed, stream) {
  const common = { model: 'default', temperature: 1, top_p: 1, seed, max_tokens: c.maxTokens ?? 200, ...c.fields };
  const request = c.chat ? { ...common, messages: [{ role: 'user', content: `Write the ${c.label} as JSON.` }] }
                         : { ...common, prompt: `The ${c.label}:` };
  const api = c.chat ? client.chat.completions : client.completions;
  if (!stream) {
    const response = await api.create(request);
    const choice = response.choices[0];
    return { text: c.chat ? choice.message.content : choice.text, finish: choice.finish_reason };
  }
  let text = '';
  let finish = null;
  for await (const chunk of await api.create({ ...request, stream: true })) {
    for (const choice of chunk.choices) {
      text += (c.chat ? choice.delta?.content : choice.text) ?? '';
      finish = choice.finish_reason ?? finish;
    }
  }
  return { text, finish };
}

// Runs every case (seeds 1 and 2 whole, seed 1 streamed too) concurrently, checks that a
// stream says what the whole answer says, and hands the finished outputs to the validator.
async function conformance(server, selected, seeds) {
  const client = new OpenAI({ apiKey: 'unused', baseURL: `${server.baseURL}/v1` });
  const runs = [];
  for (const c of selected) {
    for (const seed of seeds) runs.push(generate(client, c, seed, false).then((out) => ({ c, seed, stream: false, ...out })));
    runs.push(generate(client, c, seeds[0], true).then((out) => ({ c, seed: seeds[0], stream: true, ...out })));
  }
  const results = await Promise.all(runs);
  for (const r of results.filter((x) => x.stream)) {
    const whole = results.find((x) => !x.stream && x.c === r.c && x.seed === r.seed);
    assert.equal(r.text, whole.text, `${r.c.label}: the stream differs from the whole answer`);
    assert.equal(r.finish, whole.finish);
  }
  const finished = results.filter((r) => r.finish === 'stop' || r.c.kind === 'structural_tag');
  const items = finished.map((r) => ({ label: `${r.c.label} seed ${r.seed}${r.stream ? ' streamed' : ''}`, kind: r.c.kind,
                                       constraint: r.c.constraint, text: r.text, cut: r.finish !== 'stop' }));
  const dir = scratchDir('ernie-structured-');
  const file = path.join(dir, 'outputs.json');
  writeFileSync(file, JSON.stringify(items));
  const run = spawnSync(python, [path.join(here, 'python', 'validate_structured.py'), file], { encoding: 'utf8', timeout: 60000 });
  assert.equal(run.error, undefined, `${python} could not run`);
  assert.equal(run.status, 0, run.stdout + run.stderr);
  for (const r of results) assert.ok(r.finish === 'stop' || r.finish === 'length', `${r.c.label}: ${r.finish}`);
  return { results, finished: results.filter((r) => r.finish === 'stop').length };
}

test('every finished output of the random golden model validates', { timeout: 300000 }, async () => {
  const server = await startServer([], {}, { maxModelLen: 1024 });
  try {
    const { results, finished } = await conformance(server, cases, [1, 2]);
    // Bounded constraints always finish: the grammar runs out and leaves only the end token.
    for (const label of ['phone', 'animals', 'names', 'city', 'sum', 'person', 'status', 'tuple'])
      assert.ok(results.filter((r) => r.c.label === label).every((r) => r.finish === 'stop'), label);
    assert.ok(finished >= 0.6 * results.length, `${finished} of ${results.length} finished`);
  } finally {
    assert.equal(await server.stop(), 0);
  }
});

test('every finished output of the shipped model validates', { timeout: 300000 }, async () => {
  const server = await startServer([], {}, { model: null, maxModelLen: null });
  try {
    const picked = cases.filter((c) => ['person', 'order', 'status', 'phone', 'city', 'object'].includes(c.label));
    const { results } = await conformance(server, picked, [3]);
    for (const label of ['person', 'status', 'phone', 'city'])
      assert.ok(results.filter((r) => r.c.label === label).every((r) => r.finish === 'stop'), label);
  } finally {
    assert.equal(await server.stop(), 0);
  }
});

test('constraint errors are 400s naming the field; off refuses constrained requests', { timeout: 120000 }, async () => {
  const server = await startServer(['--guided-decoding-backend', 'off']);
  const strictServer = await startServer(['--guided-decoding-backend', 'xgrammar', '--guided-decoding-disable-any-whitespace']);
  try {
    const off = new OpenAI({ apiKey: 'unused', baseURL: `${server.baseURL}/v1` });
    await assert.rejects(off.completions.create({ model: 'default', prompt: 'x', guided_regex: 'a+' }),
                         (error) => error.status === 400 && error.param === 'guided_regex' && /--guided-decoding-backend/.test(error.message));
    const client = new OpenAI({ apiKey: 'unused', baseURL: `${strictServer.baseURL}/v1` });
    const refusals = [
      [{ guided_regex: '(a)\\1' }, 'guided_regex', /backreferences/],
      [{ guided_json: { type: 'object', properties: { a: { type: 'string', format: 'ipv4' } } } }, 'guided_json', /ipv4/],
      [{ guided_grammar: 'root ::= foo' }, 'guided_grammar', /foo/],
      [{ guided_regex: 'a', guided_choice: ['a'] }, 'guided_choice', /only one kind/],
      [{ structural_tag: { structures: [{ begin: '<x>', end: '</x>' }], triggers: ['<y'] } }, 'structural_tag', /triggers/],
    ];
    for (const [fields, param, message] of refusals) {
      await assert.rejects(client.completions.create({ model: 'default', prompt: 'x', max_tokens: 4, stream: true, ...fields }),
                           (error) => error.status === 400 && error.param === param && message.test(error.message),
                           JSON.stringify(fields));
    }
    // Compact JSON: no whitespace but one space after ':' and ','.
    const compact = await client.completions.create({ model: 'default', prompt: 'x', temperature: 1, top_p: 1, seed: 4,
                                                      max_tokens: 200, guided_json: status });
    assert.equal(compact.choices[0].finish_reason, 'stop');
    assert.doesNotMatch(compact.choices[0].text, /[\n\t]|  |\{ |: {2}/);
  } finally {
    assert.equal(await server.stop(), 0);
    assert.equal(await strictServer.stop(), 0);
  }
});
