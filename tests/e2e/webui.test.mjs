// The built-in chat page (webui/, docs/webui.md) in a real browser: Debian's chromium,
// headless, driven by puppeteer-core, against the real `ernie serve`. It streams an
// answer, stops one (the server logs the abort), keeps
// conversations across a reload, shows the scripted thinking model's reasoning in a
// panel that opens and closes and its tool calls as blocks, sends the settings, asks for
// the API key, renders model output as text only, and looks like its committed
// screenshots at a desktop and a phone size.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import puppeteer from 'puppeteer-core';
import { scratchDir } from './scratch.mjs';
import { startServer } from './server.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const baselines = path.join(here, 'webui');
const logDir = process.env.ERNIE_E2E_LOG_DIR ?? '/tmp/ernie-e2e-logs';
const shipped = { model: null, maxModelLen: null };

let browser;
before(async () => {
  const executablePath = process.env.ERNIE_CHROMIUM ?? '/usr/bin/chromium';
  assert.ok(fs.existsSync(executablePath), `no browser at ${executablePath}: scripts/install-deps.sh installs Debian's chromium`);
  browser = await puppeteer.launch({
    executablePath,
    headless: true,
    // Root in a container has no user namespace for the sandbox; fixed fonts and no GPU
    // keep screenshots the same from run to run.
    args: ['--no-sandbox', '--disable-gpu', '--font-render-hinting=none', '--disable-lcd-text', '--hide-scrollbars'],
  });
});
after(async () => { await browser?.close(); });

// A fresh page (its own storage) at a viewport size, failing on any console error.
async function openPage(url, viewport = { width: 1200, height: 800 }, context = null) {
  const owner = context ?? await browser.createBrowserContext();
  const page = await owner.newPage();
  page.errors = [];
  page.on('pageerror', (error) => page.errors.push(String(error)));
  page.on('console', (message) => { if (message.type() === 'error') page.errors.push(message.text()); });
  await page.emulateMediaFeatures([{ name: 'prefers-reduced-motion', value: 'reduce' }]);
  await page.setViewport(viewport);
  await page.goto(url);
  await page.waitForFunction(() => document.getElementById('model-name').textContent !== 'ernie.cpp');
  page.owner = owner;
  return page;
}

// The shipped model's log says "no --model: serving ..." before its port opens.
async function listening(server) {
  for (let i = 0; i < 100 && !/serving \S+ on http/.test(server.output()); ++i) await new Promise((r) => setTimeout(r, 100));
  return server;
}

const lastAnswer = (page) => page.$eval('.message.assistant:last-of-type .content', (e) => e.textContent);

async function sendMessage(page, text) {
  await page.click('#prompt');
  await page.type('#prompt', text);
  await page.keyboard.press('Enter');
}

async function setField(page, selector, value) {
  await page.$eval(selector, (input, v) => { input.value = v; }, value);
}

// Streaming and stopping need a model slow enough to watch: the shipped one writes 240
// tokens in 0.1 s, so this test runs a random model of ERNIE-4.5-0.3B's shape (about 100
// tokens/s on 2 cores) with its tokenizer's 4096-piece vocabulary: with 0.3B's 103424
// outputs a random model mostly writes ids that decode to no text at all.
test('the page streams an answer, stops one, and finds its conversations after a reload', { timeout: 180000 }, async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ernie-webui-03b-'));
  const model = path.join(dir, 'model');
  execFileSync(process.env.ERNIE_BINARY, ['synth', '--out', model, '--preset', '0.3b', '--vocab', '4096'], { stdio: 'ignore' });
  const server = await startServer([], {}, { model, maxModelLen: 512 });
  try {
    const page = await openPage(server.baseURL);
    await page.click('#toggle-settings');
    await setField(page, '#temperature', '0');
    await setField(page, '#max-tokens', '100');

    // Streaming: the answer grows in many steps while the Stop button shows (recorded in
    // the page at every change of the conversation).
    await page.evaluate(() => {
      window.partialLengths = new Set();
      new MutationObserver(() => {
        const answer = document.querySelector('.message.assistant .content');
        if (answer && !document.getElementById('stop').hidden) window.partialLengths.add(answer.textContent.length);
      }).observe(document.getElementById('messages'), { childList: true, subtree: true, characterData: true });
    });
    await sendMessage(page, 'And God said');
    await page.waitForSelector('.message.assistant .actions');
    const partial = await page.evaluate(() => [...window.partialLengths].filter((n) => n > 0).length);
    const first = await lastAnswer(page);
    assert.ok(partial >= 5, `saw ${partial} partial answers while streaming; the answer: ${JSON.stringify(first)}`);
    assert.ok(first.length > 20, first);

    // Stop, in a second conversation: the request is aborted on the server, and the
    // answer so far stays, marked stopped.
    await page.click('#new-chat');
    assert.equal(await page.$$eval('.message', (n) => n.length), 0);
    await setField(page, '#max-tokens', '400');
    await sendMessage(page, 'In the beginning');
    await page.waitForFunction(() => document.querySelector('.message.assistant .content')?.textContent.length > 0);
    await page.click('#stop');
    await page.waitForFunction(() => document.querySelector('.message.assistant .finish')?.textContent === '(stopped)');
    assert.ok((await lastAnswer(page)).length > 0);
    for (let i = 0; i < 50 && !/finish=abort \(client disconnected\)/.test(server.output()); ++i) await new Promise((r) => setTimeout(r, 100));
    assert.match(server.output(), /finish=abort \(client disconnected\)/);
    assert.equal(await page.$eval('#send', (b) => b.hidden), false);

    // Regenerate replaces the last answer.
    await setField(page, '#max-tokens', '8');
    await page.click('.message.assistant .actions button:nth-of-type(2)');
    await page.waitForFunction(() => !document.querySelector('#send').hidden && document.querySelectorAll('.message.assistant').length === 1
      && document.querySelector('.message.assistant .actions'));
    assert.equal(await page.$eval('.message.assistant .finish', (e) => e.textContent), '(length)');

    // A reload finds both conversations in local storage, the latest open.
    await page.reload();
    await page.waitForSelector('.message.user');
    assert.deepEqual(await page.$$eval('.conversation', (n) => n.map((e) => e.textContent)), ['In the beginning', 'And God said']);
    assert.equal(await page.$eval('.message.user', (e) => e.textContent), 'In the beginning');
    await page.click('.conversation:not(.current)');
    assert.equal(await page.$eval('.message.user', (e) => e.textContent), 'And God said');
    assert.equal(await lastAnswer(page), first);

    // The status strip comes from /metrics.
    await page.waitForFunction(() => document.querySelector('[data-figure="kv"] b').textContent.endsWith('%'));
    assert.deepEqual(page.errors, []);
    await page.owner.close();
  } finally {
    assert.equal(await server.stop(), 0);
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('the page asks for the API key, keeps it, and the server still refuses requests without one', { timeout: 60000 }, async () => {
  const server = await listening(await startServer(['--api-key', 'sesame'], {}, shipped));
  try {
    const context = await browser.createBrowserContext();
    const page = await context.newPage();
    await page.goto(server.baseURL);
    await page.waitForSelector('#key-dialog[open]');
    await page.type('#key-input', 'sesame');
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => document.getElementById('model-name').textContent === 'ernie-4.5-kjv-dense');
    await sendMessage(page, 'And God said');
    await page.waitForSelector('.message.assistant .actions');
    assert.equal(await page.$('.message .error'), null);
    const plain = await fetch(`${server.baseURL}/v1/models`);
    assert.equal(plain.status, 401);
    await context.close();
  } finally {
    assert.equal(await server.stop(), 0);
  }
});

test('--no-webui serves no page', { timeout: 60000 }, async () => {
  const server = await listening(await startServer(['--no-webui'], {}, shipped));
  try {
    assert.equal((await fetch(`${server.baseURL}/`)).status, 404);
    assert.equal((await fetch(`${server.baseURL}/webui/app.js`)).status, 404);
  } finally {
    assert.equal(await server.stop(), 0);
  }
});

test('a vision model offers attachments, and an attached image goes out as an image_url part', { timeout: 120000 }, async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ernie-webui-vl-'));
  const model = path.join(dir, 'model');
  execFileSync(process.env.ERNIE_BINARY, ['synth', '--out', model, '--preset', 'vl-tiny'], { stdio: 'ignore' });
  const server = await startServer(['--reasoning-parser', 'ernie-45-vl'], {}, { model, maxModelLen: 1024 });
  try {
    const page = await openPage(server.baseURL);
    assert.equal(await page.$eval('#attach', (b) => b.hidden), false);
    // A small PNG: the browser's own screenshot of a corner of the page.
    const image = path.join(dir, 'corner.png');
    fs.writeFileSync(image, await page.screenshot({ clip: { x: 0, y: 0, width: 28, height: 28 } }));
    const bodies = [];
    page.on('request', (request) => { if (request.url().endsWith('/v1/chat/completions')) bodies.push(JSON.parse(request.postData())); });
    await (await page.$('#file')).uploadFile(image);
    await page.waitForFunction(() => document.querySelector('#attachments li')?.textContent.startsWith('corner.png'));
    await page.click('#toggle-settings');
    await setField(page, '#max-tokens', '4');
    await sendMessage(page, 'What is this?');
    await page.waitForSelector('.message.assistant .actions');
    assert.equal(await page.$('.message .error'), null);
    const parts = bodies[0].messages[0].content;
    assert.equal(parts[0].type, 'image_url');
    assert.match(parts[0].image_url.url, /^data:image\/png;base64,/);
    assert.deepEqual(parts[1], { type: 'text', text: 'What is this?' });
    assert.equal(await page.$$eval('.message.user .attached img', (n) => n.length), 1);
    assert.equal(await page.$$eval('#attachments li', (n) => n.length), 0);
    assert.deepEqual(page.errors, []);
    await page.owner.close();
  } finally {
    assert.equal(await server.stop(), 0);
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

// ---------------------------------------------------------------- the thinking model

const scripts = [
  { when: ['weather'],
    reply: 'The user wants the weather.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n' },
  { when: ['markup'],
    reply: 'Showing markup.\n</think>\n\n<response>\n<img src=x onerror="window.injected=1"> **bold** <script>window.injected=2</script>\n\n' +
           '```js\nconsole.log("<b>");\n```\n[link](javascript:alert(1))\n</response>\n' },
  { when: ['capital'],
    reply: 'Paris is a city.\nIt is in France.\n</think>\n\n<response>\nThe capital of France is **Paris**.\n\n' +
           '- It is large.\n- It has `museums`.\n</response>\n' },
];

let thinking;
let metricsText;
before(async () => {
  const dir = scratchDir('ernie-webui-');
  const scriptFile = path.join(dir, 'script.json');
  fs.writeFileSync(scriptFile, JSON.stringify({ answer_start: '<|im_start|>assistant\n<think>\n', end: '<|im_end|>', scripts }));
  // A served name, so the screenshots do not show this machine's model path.
  thinking = await startServer(['--reasoning-parser', 'ernie_x1', '--tool-call-parser', 'ernie_x1',
                                '--served-model-name', 'ERNIE-4.5-21B-A3B-Thinking'], {},
                               { command: [process.env.ERNIE_SCRIPTED_SERVER, scriptFile], model: process.env.ERNIE_THINKING_MODEL });
  metricsText = await (await fetch(`${thinking.baseURL}/metrics`)).text();
});
after(async () => { assert.equal(await thinking.stop(), 0); });

test('reasoning opens and closes apart from the answer, tool calls are blocks, settings reach the request', { timeout: 60000 }, async () => {
  const page = await openPage(thinking.baseURL);
  const bodies = [];
  page.on('request', (request) => { if (request.url().endsWith('/v1/chat/completions')) bodies.push(JSON.parse(request.postData())); });
  await page.click('#toggle-settings');
  await setField(page, '#temperature', '0.3');
  await setField(page, '#max-tokens', '100');
  await setField(page, '#reasoning-max-tokens', '40');
  await sendMessage(page, 'What is the capital?');
  await page.waitForSelector('.message.assistant .actions');
  assert.equal(await page.$eval('.message.assistant .content', (e) => e.innerText.replace(/\s+/g, ' ').trim()),
               'The capital of France is Paris. It is large. It has museums.');
  assert.equal(await page.$eval('.message.assistant .content strong', (e) => e.textContent), 'Paris');
  assert.equal(await page.$$eval('.message.assistant .content li', (n) => n.length), 2);
  // The reasoning panel starts closed, opens and closes again.
  const open = () => page.$eval('.reasoning', (d) => d.open);
  assert.equal(await open(), false);
  assert.equal(await page.$eval('.reasoning-text', (e) => e.checkVisibility()), false);
  await page.click('.reasoning summary');
  assert.equal(await open(), true);
  assert.equal(await page.$eval('.reasoning-text', (e) => e.textContent.trim()), 'Paris is a city.\nIt is in France.');
  assert.equal(await page.$eval('.reasoning-text', (e) => e.checkVisibility()), true);
  await page.focus('.reasoning summary');
  await page.keyboard.press('Enter');  // keyboard too
  assert.equal(await open(), false);
  assert.deepEqual({ ...bodies[0], messages: undefined }, {
    model: bodies[0].model, stream: true, temperature: 0.3, top_p: 0.8, max_tokens: 100,
    chat_template_kwargs: { enable_thinking: true }, reasoning_max_tokens: 40, messages: undefined,
  });

  // Thinking off goes into the request, and so do the tools.
  await page.click('#thinking');
  await setField(page, '#tools', JSON.stringify([{ type: 'function', function: { name: 'get_weather',
    parameters: { type: 'object', properties: { city: { type: 'string' } } } } }]));
  await sendMessage(page, 'What is the weather?');
  await page.waitForFunction(() => document.querySelectorAll('.message.assistant .actions').length === 2);
  assert.equal(bodies[1].chat_template_kwargs.enable_thinking, false);
  assert.equal(bodies[1].messages.length, 3);
  assert.equal(bodies[1].tools[0].function.name, 'get_weather');
  assert.equal(await page.$eval('.message.assistant:last-of-type .tool-name', (e) => e.textContent), '\u{1F527} get_weather');
  assert.deepEqual(JSON.parse(await page.$eval('.message.assistant:last-of-type .tool-call pre', (e) => e.textContent)),
                   { city: 'Paris' });
  assert.deepEqual(page.errors, []);
  await page.owner.close();
});

test('model output is shown as text: no markup, script or unsafe link gets in', { timeout: 60000 }, async () => {
  const page = await openPage(thinking.baseURL);
  await sendMessage(page, 'Show me markup');
  await page.waitForSelector('.message.assistant .actions');
  const content = await page.$eval('.message.assistant .content', (e) => ({
    text: e.textContent, images: e.querySelectorAll('img').length, scripts: e.querySelectorAll('script').length,
    links: [...e.querySelectorAll('a')].map((a) => a.href), code: e.querySelector('pre code')?.textContent,
  }));
  assert.match(content.text, /<img src=x onerror="window.injected=1">/);
  assert.match(content.text, /<script>window.injected=2<\/script>/);
  assert.equal(content.images, 0);
  assert.equal(content.scripts, 0);
  assert.deepEqual(content.links, []);
  assert.equal(content.code, 'console.log("<b>");');
  assert.equal(await page.evaluate(() => window.injected), undefined);
  await page.owner.close();
});

// ---------------------------------------------------------------- screenshots

// The share of pixels that differ by more than a small amount between two PNGs, compared
// in the browser (it decodes PNG; no image library needed here).
async function pixelDifference(a, b) {
  const page = await browser.newPage();
  try {
    return await page.evaluate(async (first, second) => {
      const load = (data) => new Promise((resolve, reject) => {
        const image = new Image();
        image.onload = () => resolve(image);
        image.onerror = reject;
        image.src = `data:image/png;base64,${data}`;
      });
      const [x, y] = await Promise.all([load(first), load(second)]);
      if (x.width !== y.width || x.height !== y.height) return 1;
      const pixels = (image) => {
        const canvas = new OffscreenCanvas(image.width, image.height);
        const context = canvas.getContext('2d');
        context.drawImage(image, 0, 0);
        return context.getImageData(0, 0, image.width, image.height).data;
      };
      const p = pixels(x), q = pixels(y);
      let differing = 0;
      for (let i = 0; i < p.length; i += 4)
        if (Math.abs(p[i] - q[i]) + Math.abs(p[i + 1] - q[i + 1]) + Math.abs(p[i + 2] - q[i + 2]) > 48) ++differing;
      return differing / (p.length / 4);
    }, a.toString('base64'), b.toString('base64'));
  } finally {
    await page.close();
  }
}

// The main view with a fixed conversation and fixed server figures (a scripted answer;
// /metrics answered from the test's copy with the counters zeroed).
for (const [name, viewport] of [['desktop', { width: 1200, height: 800 }], ['phone', { width: 390, height: 760, deviceScaleFactor: 1 }]]) {
  test(`the main view looks like its screenshot at ${name} size`, { timeout: 60000 }, async () => {
    const context = await browser.createBrowserContext();
    const page = await context.newPage();
    await page.setRequestInterception(true);
    page.on('request', (request) => {
      if (!request.url().endsWith('/metrics')) return request.continue();
      return request.respond({ status: 200, contentType: 'text/plain',
                               body: metricsText.replace(/^(fastdeploy:\w+(?:\{[^}]*\})?) .*$/gm, '$1 0') });
    });
    await page.emulateMediaFeatures([{ name: 'prefers-reduced-motion', value: 'reduce' }]);
    await page.setViewport(viewport);
    await page.goto(thinking.baseURL);
    await page.waitForFunction(() => document.getElementById('model-name').textContent !== 'ernie.cpp');
    await sendMessage(page, 'What is the capital?');
    await page.waitForSelector('.message.assistant .actions');
    await page.waitForFunction(() => document.querySelector('[data-figure="kv"] b').textContent === '0.0%');
    await page.click('#prompt');
    const shot = await page.screenshot();
    await context.close();
    const baseline = path.join(baselines, `${name}.png`);
    fs.mkdirSync(logDir, { recursive: true });
    fs.writeFileSync(path.join(logDir, `webui-${name}.png`), shot);
    if (process.env.ERNIE_UPDATE_SCREENSHOTS === '1') fs.writeFileSync(baseline, shot);
    assert.ok(fs.existsSync(baseline), `no baseline ${baseline}: run with ERNIE_UPDATE_SCREENSHOTS=1 once`);
    const share = await pixelDifference(fs.readFileSync(baseline), shot);
    assert.ok(share < 0.01, `${(100 * share).toFixed(2)}% of the pixels differ from ${baseline} (this run's: ${logDir}/webui-${name}.png)`);
  });
}
