/**
 * `run --serve 127.0.0.1:0 -- node server.js`: a service profiled in one command. go tool
 * pprof reads its /debug/pprof/heap with the JavaScript function that holds the memory named;
 * after a SIGTERM (to run, or to the program) or a SIGINT, no file V8 or the profiler wrote is
 * left: not /tmp/perf-<pid>.map, not isolate-*-<pid>-v8.log in its folder, not run's own.
 * Control: the same service started by hand with V8's flags and SIGTERMed leaves its perf map.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';

import { root, tempDir } from '../helpers.js';
import { goPprof, topNames, waitFor } from '../http/service.js';

const cli = join(root, 'dist', 'src', 'cli', 'bin.js');
const server = `const http = require('node:http');
const kept = [];
function rememberRequest(n) { for (let i = 0; i < n; i++) kept.push(Buffer.alloc(1 << 20, 1)); }
rememberRequest(24);
const s = http.createServer((req, res) => res.end('ok'));
s.listen(0, '127.0.0.1', () => console.log('ready'));
`;

interface Started {
  child: ChildProcess;
  stderr: () => string;
  exited: Promise<number | null>;
}

function start(command: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = process.env): Started {
  const child = spawn(command, args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
  child.stdout!.resume();
  const exited = new Promise<number | null>((r) => child.on('exit', (code, signal) => r(code ?? (signal ? 128 : null))));
  return { child, stderr: () => stderr, exited };
}

/** run's folders now (each run has one while it lives). */
const runFolders = () => new Set(readdirSync(tmpdir()).filter((f) => f.startsWith('mimalloc-pprof-run-')));

function leftovers(dir: string, pid: number): string[] {
  const found = readdirSync(dir).filter((f) => new RegExp(`^isolate-0x[0-9a-f]+-${pid}-v8\\.log$`).test(f));
  if (existsSync(`/tmp/perf-${pid}.map`)) found.push(`/tmp/perf-${pid}.map`);
  return found;
}

async function served(stop: (s: Started, pid: number) => void, check: boolean) {
  const dir = tempDir('mpp-serve-');
  writeFileSync(join(dir, 'server.js'), server);
  const before = runFolders();
  const s = start(process.execPath, [cli, 'run', '--serve', '127.0.0.1:0', '--out', 'exit.pb.gz', '--', process.execPath, 'server.js'], dir);
  await waitFor(() => /serving http:\/\/\S+ \(pid \d+\)/.test(s.stderr()), 30_000, `the serving line; stderr: ${s.stderr()}`);
  const [, url, pid] = /serving (http:\/\/\S+) \(pid (\d+)\)/.exec(s.stderr())!;
  if (check) {
    const r = await goPprof(['-top', `${url}heap`]);
    assert.equal(r.code, 0, r.out);
    assert.ok(topNames(r.out).includes('rememberRequest'), r.out);
    assert.ok(existsSync(`/tmp/perf-${pid}.map`), 'V8 writes its perf map while it runs');
  }
  // this run's folder (other runs on the machine have their own)
  const fresh = [...runFolders()].filter((f) => !before.has(f) && existsSync(join(tmpdir(), f, `loaded.${pid}`)));
  assert.equal(fresh.length, 1, 'the run\'s folder while it runs');
  stop(s, Number(pid));
  await s.exited;
  assert.deepEqual(leftovers(dir, Number(pid)), []);
  // the run's own folder is gone with it
  for (const f of fresh) assert.ok(!existsSync(join(tmpdir(), f)), f);
  rmSync(dir, { recursive: true, force: true });
}

test('run --serve: go tool pprof names the JavaScript function; SIGTERM to run leaves no file behind', async () => {
  await served((s) => s.child.kill('SIGTERM'), true);
});

test('run --serve: SIGTERM to the program, SIGINT to run: no file behind either', async () => {
  await served((_, pid) => process.kill(pid, 'SIGTERM'), false);
  await served((s) => s.child.kill('SIGINT'), false);
});

test('control: the service started by hand with V8\'s flags, SIGTERMed, leaves its perf map', async () => {
  const dir = tempDir('mpp-serve-hand-');
  writeFileSync(join(dir, 'server.js'), server);
  const s = start(process.execPath, ['--perf-basic-prof', '--interpreted-frames-native-stack', 'server.js'], dir);
  const pid = s.child.pid!;
  await waitFor(() => existsSync(`/tmp/perf-${pid}.map`), 30_000, 'the perf map');
  await new Promise((r) => setTimeout(r, 300));
  s.child.kill('SIGTERM');
  await s.exited;
  const left = leftovers(dir, pid);
  for (const f of left) rmSync(f.startsWith('/') ? f : join(dir, f), { force: true });
  assert.ok(left.includes(`/tmp/perf-${pid}.map`), left.join(' '));
});

test('--serve [HOST:]PORT: addresses read, bad ones one usage line', async () => {
  const { parseRunArgs } = await import('../../src/cli/run.js');
  const { parseServeAddress } = await import('../../src/http/serve-address.js');
  assert.deepEqual(parseServeAddress('6060'), { host: '127.0.0.1', port: 6060 });
  assert.deepEqual(parseServeAddress('0.0.0.0:0'), { host: '0.0.0.0', port: 0 });
  assert.deepEqual(parseServeAddress('[::1]:6060'), { host: '::1', port: 6060 });
  for (const bad of ['', 'x', '70000', 'host:', ':6060', '1.2.3.4:port']) assert.equal(typeof parseServeAddress(bad), 'string', bad);
  const opts = parseRunArgs(['--serve', '127.0.0.1:7070', '--token', 'T', '--', 'node', 's.js']);
  assert.ok(opts !== 'help' && opts.serve === '127.0.0.1:7070' && opts.serveToken === 'T');
  assert.throws(() => parseRunArgs(['--serve', 'nope', '--', 'node']), /--serve takes \[HOST:\]PORT/);
  assert.throws(() => parseRunArgs(['--token', 'T', '--', 'node']), /--token goes with --serve/);
  assert.throws(() => parseRunArgs(['--serve', '6060', '--no-profile', '--', 'node']), /--serve needs the profiler/);
});
