// A FastDeploy launch line with quantization: mix_quant JSON (dense wint8, experts wint4,
// int8 KV cache) and --use-cudagraph, served and queried with the official OpenAI client.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { startServer } from './server.mjs';

const mixQuant = JSON.stringify({
  quantization: 'mix_quant', dense_quant_type: 'wint8', moe_quant_type: 'wint4', kv_cache_quant_type: 'int8',
});

test('quantized server answers, streamed and not, with the same greedy text', { timeout: 120000 }, async () => {
  const server = await startServer(['--quantization', mixQuant, '--use-cudagraph']);
  try {
    assert.match(server.output(), /quantization: dense layers wint8, experts wint4, LM head wint8, KV cache int8/);
    assert.match(server.output(), /use-cudagraph.*on anyway/);
    const client = new OpenAI({ apiKey: 'unused', baseURL: `${server.baseURL}/v1` });
    const messages = [{ role: 'user', content: 'Count to five.' }];
    const whole = await client.chat.completions.create({ model: 'default', messages, max_tokens: 12, temperature: 0 });
    assert.equal(typeof whole.choices[0].message.content, 'string');
    assert.ok(whole.usage.completion_tokens >= 1);
    const stream = await client.chat.completions.create({
      model: 'default', messages, max_tokens: 12, temperature: 0, stream: true,
    });
    let streamed = '';
    for await (const chunk of stream) streamed += chunk.choices[0]?.delta?.content ?? '';
    assert.equal(streamed, whole.choices[0].message.content);
  } finally {
    assert.equal(await server.stop(), 0);
  }
});

test('a quantization ernie.cpp cannot run is refused at start, naming the accepted ones', { timeout: 60000 }, async () => {
  await assert.rejects(startServer(['--quantization', 'w4a8']),
                       /FastDeploy GPU scheme ernie.cpp does not run on CPUs; use wint8, wint4, block_wise_fp8/);
});

// FastDeploy's WINT2 release format (docs/quantization.md), made by tools/make_fastdeploy_wint2.py
// from the golden Paddle MoE model, started with the 300B guide's flags.
test('a WINT2 checkpoint starts with the 300B seed flags and answers', { timeout: 120000 }, async () => {
  const tools = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'tools');
  const golden = path.join(path.dirname(process.env.ERNIE_E2E_MODEL), 'tiny-moe-paddle');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wint2-'));
  try {
    const made = spawnSync(process.env.ERNIE_PYTHON3 ?? 'python3',
                           [path.join(tools, 'make_fastdeploy_wint2.py'), golden, dir, '--w4-end-layer', '1'],
                           { encoding: 'utf8' });
    assert.equal(made.status, 0, made.stderr);
    const server = await startServer(['--tensor-parallel-size', '1', '--quantization', 'wint4', '--kv-cache-ratio', '0.75',
                                      '--max-num-seqs', '128'], {}, { model: dir, maxModelLen: 32768 });
    try {
      assert.match(server.output(), /FastDeploy WINT2 checkpoint: routed experts past layer 1 are read as stored/);
      assert.match(server.output(), /--quantization wint4 is ignored/);
      const client = new OpenAI({ apiKey: 'unused', baseURL: `${server.baseURL}/v1` });
      const answer = await client.completions.create({ model: 'default', prompt: 'The', max_tokens: 8, temperature: 0 });
      assert.equal(answer.usage.completion_tokens, 8);
    } finally {
      assert.equal(await server.stop(), 0);
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

// FastDeploy's W4A8C8 tensor-parallel release format (docs/quantization.md), made by
// tools/make_fastdeploy_w4a8c8.py from the shipped MoE model (inner size padded to 256,
// exact) and pre-sharded into rank0/ and rank1/, started with the 300B guide's flags at
// --tensor-parallel-size 2: each rank keeps its own part of every expert. It answers what
// one process that joins the parts answers.
test('a W4A8C8 rank-directory release starts with the 300B seed flags at its TP size and at 1', { timeout: 240000 }, async () => {
  const root = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'w4a8c8-'));
  try {
    const made = spawnSync(process.env.ERNIE_PYTHON3 ?? 'python3',
                           [path.join(root, 'tools', 'make_fastdeploy_w4a8c8.py'), path.join(root, 'models', 'ernie-4.5-kjv-moe'),
                            dir, '--tp', '2', '--pad-intermediate', '256', '--dense-quant-type', 'wint8'],
                           { encoding: 'utf8' });
    assert.equal(made.status, 0, made.stderr);
    assert.ok(fs.existsSync(path.join(dir, 'rank1', 'model.safetensors')));
    const seedFlags = ['--quantization', 'wint4', '--kv-cache-ratio', '0.75', '--max-num-seqs', '128'];
    const texts = [];
    for (const tp of ['1', '2']) {
      const server = await startServer(['--tensor-parallel-size', tp, ...seedFlags], {}, { model: dir, maxModelLen: null });
      try {
        for (let i = 0; i < 600 && !/serving \S+ on http/.test(server.output()); ++i) await new Promise((r) => setTimeout(r, 100));
        assert.match(server.output(), /FastDeploy W4A8 checkpoint: routed experts read as stored .*KV cache int8 with the checkpoint's static scales/);
        assert.match(server.output(), /quantization: dense layers wint8, experts W4A8 as stored/);
        assert.match(server.output(), /--quantization wint4 is ignored/);
        const client = new OpenAI({ apiKey: 'unused', baseURL: `${server.baseURL}/v1` });
        const answer = await client.completions.create({ model: 'default', prompt: 'And God said', max_tokens: 16, temperature: 0 });
        assert.equal(answer.usage.completion_tokens, 16);
        texts.push(answer.choices[0].text);
      } finally {
        assert.equal(await server.stop(), 0, server.output());
      }
    }
    assert.equal(texts[1], texts[0]);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
