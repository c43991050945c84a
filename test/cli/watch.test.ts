/**
 * `top --watch` (issue 34 (3)) in a real terminal: tmux runs it against a live service started
 * by `run --serve`; the pane shows the growing function with its file:line, a significant
 * growth and a peak; `s` and `t` switch the sort and the sample type; `q` ends it. Contrast
 * (the column's control): the 8 MiB kept once at start is in use but not growing. Without a
 * terminal it prints one table per read and ends on SIGTERM.
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import { root, tempDir } from '../helpers.js';
import { waitFor } from '../http/service.js';

const cli = join(root, 'dist', 'src', 'cli', 'bin.js');
const fixture = join(root, 'test', 'cli', 'fixtures', 'growing-service.cjs');
const socket = `mpp-watch-${process.pid}`;
const tmux = (...args: string[]) => spawnSync('tmux', ['-L', socket, ...args], { encoding: 'utf8' });
const pane = () => tmux('capture-pane', '-p', '-t', 'w').stdout;

let service: ChildProcess;
let url = '';

before(async () => {
  let stderr = '';
  service = spawn(process.execPath, [cli, 'run', '--serve', '127.0.0.1:0', '--out', join(tempDir('mpp-watch-'), 'exit.pb.gz'), '--', process.execPath, fixture], { stdio: ['ignore', 'ignore', 'pipe'] });
  service.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
  await waitFor(() => /serving http:\/\/\S+ \(pid \d+\)/.test(stderr), 30_000, `the serving line; stderr: ${stderr}`);
  url = `${/serving (http:\/\/\S+) \(pid/.exec(stderr)![1]}heap`;
});

after(() => {
  tmux('kill-server');
  service.kill('SIGTERM');
});

test('in tmux: the growing function with file:line, its growth significant, the still one not; s, t and q', async () => {
  assert.equal(tmux('new-session', '-d', '-s', 'w', '-x', '200', '-y', '50', `${process.execPath} ${cli} top --watch 1 ${url}; echo "watch ended: $?"; sleep 60`).status, 0);
  // a few reads: growth needs two, its interval three
  await waitFor(() => /window \d+ s, [4-9]\d* profiles|window \d+ s, \d{2,} profiles/.test(pane()), 30_000, `four profiles in the window:\n${pane()}`);
  const first = pane();
  assert.match(first, /^inuse_space: \S+ now, peak \S+, growth \+\S+\/min/m, first);
  const grow = first.split('\n').find((l) => / growCache \S+growing-service\.cjs:\d+( |$)/.test(l));
  assert.ok(grow, `a row for growCache with its file:line:\n${first}`);
  assert.match(grow, /\+[\d.]+[KMG]iB +\[\+[\d.]+[KMG]iB, \+[\d.]+[KMG]iB\]\* /, `growCache grows, significantly: ${grow}`);
  assert.match(first, /^sort: growth/m);
  tmux('send-keys', '-t', 'w', 's');
  await waitFor(() => /^sort: inuse/m.test(pane()), 10_000, `sort by in use:\n${pane()}`);
  // the contrast: 8 MiB in use since the start, not growing
  const byUse = pane();
  const still = byUse.split('\n').find((l) => / keepStartup \S+growing-service\.cjs:\d+( |$)/.test(l));
  assert.ok(still, `a row for keepStartup by in use:\n${byUse}`);
  assert.match(still, /^\s+[\d.]+MiB /, `keepStartup holds MiBs: ${still}`);
  assert.doesNotMatch(still, /\]\* /, `keepStartup does not grow: ${still}`);
  tmux('send-keys', '-t', 'w', 't');
  await waitFor(() => /^inuse_objects: /m.test(pane()), 10_000, `objects:\n${pane()}`);
  tmux('send-keys', '-t', 'w', 'q');
  // q ends top with status 0: the pane's shell goes on to say so
  await waitFor(() => /^watch ended: 0$/m.test(pane()), 10_000, `top --watch ended on q:\n${pane()}`);
});

test('not on a terminal: one table per read, and SIGTERM ends it with status 0', async () => {
  const child = spawn(process.execPath, [cli, 'top', '--watch', '0.5', url], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout!.on('data', (c: Buffer) => (out += c.toString()));
  await waitFor(() => (out.match(/^mimalloc-pprof top --watch /gm) ?? []).length >= 3, 20_000, `three tables:\n${out}`);
  assert.doesNotMatch(out, /\x1b\[/, 'no terminal control codes in a pipe');
  const code = new Promise<number | null>((r) => child.on('exit', (c) => r(c)));
  child.kill('SIGTERM');
  assert.equal(await code, 0);
});

test('--watch needs a URL; its seconds are checked', () => {
  const r = spawnSync(process.execPath, [cli, 'top', '--watch', '1', 'x.pb.gz'], { encoding: 'utf8' });
  assert.equal(r.status, 2);
  assert.match(r.stderr, /--watch reads a live endpoint/);
  const s = spawnSync(process.execPath, [cli, 'top', '--watch', '0', url], { encoding: 'utf8' });
  assert.equal(s.status, 2);
  assert.match(s.stderr, /--watch takes seconds/);
});

test('run --live in tmux: the table while the program runs, its output in FILE.log, Ctrl-C ends the program and the profile is written', async () => {
  const dir = tempDir('mpp-live-');
  const out = join(dir, 'live.pb.gz');
  const cmd = `cd ${dir} && ${process.execPath} ${cli} run --live --out ${out} -- ${process.execPath} ${fixture}; echo "run ended: $?"; sleep 60`;
  assert.equal(tmux('new-session', '-d', '-s', 'live', '-x', '200', '-y', '50', cmd).status, 0);
  const live = () => tmux('capture-pane', '-p', '-t', 'live').stdout;
  await waitFor(() => / growCache \S+growing-service\.cjs:\d+/.test(live()) && /window \d+ s, [3-9] profiles|window \d+ s, \d{2,} profiles/.test(live()), 30_000, `the live table:\n${live()}`);
  assert.match(live(), new RegExp(`^the program's output goes to ${join(dir, 'live.log').replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')} while this table is shown$`, 'm'));
  tmux('send-keys', '-t', 'live', 'C-c');
  // SIGINT to the program: 130, as without run; its profile written
  await waitFor(() => /^run ended: 130$/m.test(live()), 30_000, `run ended on Ctrl-C:\n${live()}`);
  assert.ok(existsSync(out), live());
  assert.match(readFileSync(join(dir, 'live.log'), 'utf8'), /^ready$/m);
});
