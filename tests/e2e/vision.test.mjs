// ERNIE-4.5-VL through the server (issue 15) on a synthetic vl-tiny checkpoint (`ernie
// synth --preset vl-tiny`, with the VL tokenizer markers and chat template) started with
// the VL seed command's flags: image_url parts as data: URLs and as http URLs (from a
// local HTTP server), streamed through the official OpenAI client; the conversation's
// second turn finds the images' blocks in the prefix cache and a different image does
// not; every bad input is a 400 that names the part.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import zlib from 'node:zlib';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { scratchDir } from './scratch.mjs';
import { startServer } from './server.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const seedFlags = ['--enable-mm', '--limit-mm-per-prompt', '{"image": 3, "video": 1}', '--reasoning-parser', 'ernie-45-vl',
                   '--mm-processor-kwargs', '{"video_max_pixels": 9408, "video_min_pixels": 3136}',
                   '--quantization', 'wint8', '--max-num-seqs', '8', '--enable-prefix-caching'];
let server, textServer, imageServer, imageBase, images;

before(async () => {
  const dir = scratchDir('ernie-vl-');
  const model = path.join(dir, 'model');
  execFileSync(process.env.ERNIE_BINARY, ['synth', '--out', model, '--preset', 'vl-tiny'], { stdio: 'ignore' });
  images = path.join(dir, 'images');
  execFileSync(process.env.ERNIE_PYTHON3, [path.join(root, 'tests', 'model', 'vl_test_images.py'), images]);
  imageServer = http.createServer((request, response) => {
    const name = path.basename(request.url);
    try {
      const bytes = readFileSync(path.join(images, name));
      response.writeHead(200, { 'Content-Type': 'image/png' }).end(bytes);
    } catch {
      response.writeHead(404).end('no such image');
    }
  });
  await new Promise((resolve) => imageServer.listen(0, '127.0.0.1', resolve));
  imageBase = `http://127.0.0.1:${imageServer.address().port}`;
  server = await startServer(seedFlags, {}, { model, maxModelLen: 1024 });
  textServer = await startServer([]);
});
after(async () => {
  assert.equal(await server.stop(), 0);
  assert.equal(await textServer.stop(), 0);
  imageServer.close();
});

const client = (target) => new OpenAI({ apiKey: 'unused', baseURL: `${target.baseURL}/v1`, maxRetries: 0 });
const dataUrl = (file, type = 'image/png') => `data:${type};base64,${readFileSync(path.join(images, file)).toString('base64')}`;
const image = (url) => ({ type: 'image_url', image_url: { url } });

async function streamed(messages, extra = {}) {
  const stream = await client(server).chat.completions.create({
    model: 'default', messages, max_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true }, ...extra,
  });
  const result = { reasoning: '', content: '', finish: null, usage: null };
  for await (const chunk of stream) {
    if (chunk.usage) result.usage = chunk.usage;
    const choice = chunk.choices[0];
    if (!choice) continue;
    result.reasoning += choice.delta.reasoning_content ?? '';
    result.content += choice.delta.content ?? '';
    result.finish = choice.finish_reason ?? result.finish;
  }
  return result;
}

test('two images and a video stream an answer, and the next turn finds them in the prefix cache', async () => {
  const clip = { type: 'video_url', video_url: { url: `${imageBase}/clip.gif`, max_frames: 8 } };
  const first = [{ role: 'user', content: [image(dataUrl('wide.jpg', 'image/jpeg')), image(`${imageBase}/tall.png`), clip,
                                           { type: 'text', text: 'What differs between the two pictures and the clip?' }] }];
  const answer = await streamed(first);
  assert.equal(answer.finish, 'length');
  assert.ok(answer.reasoning.length + answer.content.length > 0, 'some text streams');
  // 55 + 27 image tokens, and the clip's 8 frames (its own max_frames) of 3x4 tokens in pairs.
  assert.ok(answer.usage.prompt_tokens > 55 + 27 + 4 * 12, `the media's tokens are in the prompt (${answer.usage.prompt_tokens})`);

  // The same conversation continued: everything up to the new turn is cached.
  const second = [...first, { role: 'assistant', content: answer.content || 'Nothing.' },
                  { role: 'user', content: 'And which one is taller?' }];
  const next = await streamed(second);
  assert.ok(next.usage.prompt_tokens_details.cached_tokens >= answer.usage.prompt_tokens - 64, JSON.stringify(next.usage));

  // The same text with another picture of the same size: its blocks are not reused.
  const other = [{ role: 'user', content: [image(dataUrl('big.png')), image(`${imageBase}/tall.png`), clip,
                                           { type: 'text', text: 'What differs between the two pictures and the clip?' }] }];
  const different = await streamed(other, { max_tokens: 2 });
  assert.ok(different.usage.prompt_tokens_details.cached_tokens < 16, JSON.stringify(different.usage));
});

test('a video streams an answer, within the frame limits the flags set', async () => {
  const video = { type: 'video_url', video_url: { url: `data:image/gif;base64,${readFileSync(path.join(images, 'clip.gif')).toString('base64')}` } };
  const answer = await streamed([{ role: 'user', content: [video, { type: 'text', text: 'What happens?' }] }]);
  assert.equal(answer.finish, 'length');
  // 40 frames at 10 a second: 16 sampled (the minimum), 100x80 -> 112x84 (video_max_pixels
  // 28*28*12): 8 pairs of 3x4 tokens.
  const plain = await streamed([{ role: 'user', content: [{ type: 'text', text: 'What happens?' }] }], { max_tokens: 1 });
  assert.ok(answer.usage.prompt_tokens - plain.usage.prompt_tokens >= 8 * 12, JSON.stringify(answer.usage));
  const second = { type: 'video_url', video_url: { url: `${imageBase}/clip.gif` } };
  await assert.rejects(client(server).chat.completions.create({ model: 'default', max_tokens: 1,
                                                               messages: [{ role: 'user', content: [video, second] }] }),
                       (error) => error.status === 400 && /more than 1 video/.test(error.message));
  await assert.rejects(client(server).chat.completions.create({ model: 'default', max_tokens: 1, messages: [{ role: 'user',
                         content: [{ type: 'video_url', video_url: { url: `data:video/mp4;base64,${Buffer.from('no video here').toString('base64')}` } }] }] }),
                       (error) => error.status === 400 && /messages\[0\]\.content\[0\]: not a video/.test(error.message));
});

test('each image costs its smart_resize token count', async () => {
  const usage = async (file) => (await client(server).chat.completions.create({
    model: 'default', max_tokens: 1, messages: [{ role: 'user', content: [image(dataUrl(file)), { type: 'text', text: 'Hi' }] }],
  })).usage.prompt_tokens;
  // wide.jpg 300x140 -> 308x140: 11x5 tokens; small.png 20x30, below min_pixels -> 56x84: 2x3 tokens.
  assert.equal(await usage('wide.jpg') - await usage('small.png'), 55 - 6);
});

test('bad images and too many are 400s naming the part', async () => {
  const rejects = async (content, pattern, target = server) => {
    await assert.rejects(client(target).chat.completions.create({ model: 'default', max_tokens: 1, messages: [{ role: 'user', content }] }),
                         (error) => error.status === 400 && pattern.test(error.message), String(pattern));
  };
  const text = { type: 'text', text: 'Describe.' };
  const png = readFileSync(path.join(images, 'small.png'));
  await rejects([image(dataUrl('small.png')), image(dataUrl('small.png')), image(dataUrl('small.png')),
                 image(dataUrl('small.png')), text], /more than 3 image.*--limit-mm-per-prompt/);
  await rejects([image(`data:image/png;base64,${png.subarray(0, 60).toString('base64')}`), text], /messages\[0\]\.content\[0\]/);
  await rejects([image(`data:image/png;base64,${Buffer.from('not an image at all').toString('base64')}`), text], /not an image|format/i);
  // A PNG header declaring 100000 x 100000 pixels: refused before any pixel is allocated.
  const bomb = Buffer.from(png);
  bomb.writeUInt32BE(100000, 16);
  bomb.writeUInt32BE(100000, 20);
  bomb.writeUInt32BE(zlib.crc32(bomb.subarray(12, 29)), 29);  // the IHDR chunk's CRC stays valid
  await rejects([image(`data:image/png;base64,${bomb.toString('base64')}`), text], /100000/);
  await rejects([image('file:///etc/passwd'), text], /scheme "file" is not fetched/);
  await rejects([image(`${imageBase}/missing.png`), text], /HTTP 404/);
  await rejects([{ type: 'image_url', image_url: {} }, text], /needs \{"image_url": \{"url"/);
  await rejects([image(dataUrl('small.png')), text], /reads text only/, textServer);
  // The server still answers.
  const ok = await client(server).chat.completions.create({ model: 'default', max_tokens: 1, messages: [{ role: 'user', content: [image(dataUrl('small.png')), text] }] });
  assert.equal(ok.choices.length, 1);
});
