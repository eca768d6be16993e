// Starts a real `ernie serve` on a free port and stops it. Used by the end-to-end tests.
import { spawn } from 'node:child_process';
import net from 'node:net';

export async function freePort() {
  return new Promise((resolve, reject) => {
    const probe = net.createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address();
      probe.close(() => resolve(port));
    });
  });
}

// Resolves once the server logs that it is serving; rejects if it exits first.
// `launch` picks another program than `ernie serve` (the scripted test server) or model:
// { command: [binary, ...leading args], model (null: no --model), maxModelLen (null: none) }.
export async function startServer(extraArgs = [], env = {}, launch = {}) {
  const [binary, ...leading] = launch.command ?? [process.env.ERNIE_BINARY, 'serve'];
  const model = launch.model === null ? null : launch.model ?? process.env.ERNIE_E2E_MODEL;
  if (!binary || model === undefined) throw new Error('ERNIE_BINARY and ERNIE_E2E_MODEL must be set');
  const port = await freePort();
  const logDir = process.env.ERNIE_E2E_LOG_DIR ?? '/tmp/ernie-e2e-logs';
  const modelArgs = model === null ? [] : ['--model', model];
  const lengthArgs = launch.maxModelLen === null ? [] : ['--max-model-len', String(launch.maxModelLen ?? 512)];
  const child = spawn(binary, [...leading, ...modelArgs, '--host', '127.0.0.1', '--port', String(port),
                               ...lengthArgs, ...extraArgs],
                      { env: { ...process.env, FD_LOG_DIR: logDir, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start:\n${output}`)), 60000);
    const onData = (data) => {
      output += data.toString();
      if (output.includes('serving ')) {
        clearTimeout(timer);
        resolve();
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`server exited with ${code}:\n${output}`));
    });
  });
  child.stdout.on('data', (data) => { output += data.toString(); });
  const exited = new Promise((resolve) => child.once('exit', (code) => resolve(code)));
  return {
    port,
    pid: child.pid,
    baseURL: `http://127.0.0.1:${port}`,
    output: () => output,
    async stop(signal = 'SIGTERM') {
      child.kill(signal);
      return exited;
    },
    exited,
  };
}
