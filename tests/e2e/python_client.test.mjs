// Clients written in Python with `requests`, as FastDeploy's users write them (issue 13,
// item 5): a stream of Chinese text must decode intact, which needs "charset=utf-8" in
// the stream's Content-Type. The answer comes from the scripted server, so it is known.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { scratchDir } from './scratch.mjs';
import { startServer } from './server.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const python = process.env.ERNIE_PYTHON3 ?? 'python3';
const answer = '北京是中国的首都。它有三千多年的历史，人口约两千万。';

let server;

before(async () => {
  const dir = scratchDir('ernie-scripts-');
  const scriptFile = path.join(dir, 'script.json');
  writeFileSync(scriptFile, JSON.stringify({ answer_start: 'Assistant: ',
                                             scripts: [{ when: ['中文'], reply: answer }] }));
  server = await startServer([], {}, { command: [process.env.ERNIE_SCRIPTED_SERVER, scriptFile],
                                       model: process.env.ERNIE_E2E_MODEL });
});

after(async () => {
  assert.equal(await server.stop(), 0);
});

test('Python requests reads a streamed Chinese answer intact', () => {
  const run = spawnSync(python, [path.join(here, 'python', 'stream_chinese.py'), server.baseURL, answer],
                        { encoding: 'utf8', timeout: 60000 });
  assert.equal(run.error, undefined, `${python} could not run`);
  assert.equal(run.status, 0, `${run.stdout}${run.stderr}`);
});
