/**
 * The Node matrix (scripts/nodes.mjs, scripts/run-tests.mjs): the set-up installed the pinned
 * official binaries into build/node/<major>, the same Node-API addon loads on each (its ABI is
 * Node's stable Node-API, version 8), and the pass this file runs in really runs the Node it
 * names: the test runner (`process.execPath`) and the `node` on PATH are MIMALLOC_PPROF_TEST_NODE
 * in a matrix pass, the machine's own Node otherwise. Control: a pass that sets the variable but
 * runs another Node (the variable ignored) is caught, with one line naming the versions.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { realpathSync } from 'node:fs';
import { delimiter, dirname, join } from 'node:path';
import { test } from 'node:test';
import { pathToFileURL } from 'node:url';

import { addonPath, libraryPath } from '../../src/preload/library.js';
import { root } from '../helpers.js';

interface Nodes {
  NODES: Record<string, { version: string; integrity: string }>;
  nodeBinary(major: string | number): string;
  versionOf(binary: string): string;
  nodesDir: string;
}
const nodes = (await import(pathToFileURL(join(root, 'scripts', 'nodes.mjs')).href)) as Nodes;

/** The real path of the `node` a shell finds on `path`, or '' for none. */
function nodeOnPath(path: string): string {
  const r = spawnSync('sh', ['-c', 'command -v node'], { encoding: 'utf8', env: { ...process.env, PATH: path } });
  return r.status === 0 ? realpathSync(r.stdout.trim()) : '';
}

/**
 * What is wrong with a pass whose environment is `env`, run by `execPath` (one line each, empty
 * when nothing): a matrix pass must run the pinned binary it names and find it first on PATH;
 * the system pass must run neither a matrix binary nor find one on PATH.
 */
function passProblems(env: NodeJS.ProcessEnv, execPath: string): string[] {
  const running = realpathSync(execPath);
  const runningVersion = nodes.versionOf(running);
  const onPath = nodeOnPath(env.PATH ?? '');
  const named = env.MIMALLOC_PPROF_TEST_NODE;
  const out: string[] = [];
  if (named) {
    const want = realpathSync(named);
    const pin = Object.values(nodes.NODES).find((p) => nodes.versionOf(want) === p.version);
    if (!pin) out.push(`MIMALLOC_PPROF_TEST_NODE=${named} is none of the pinned Nodes`);
    if (running !== want) out.push(`the pass for Node ${nodes.versionOf(want)} runs Node ${runningVersion} (${running})`);
    if (onPath !== want) out.push(`the pass for Node ${nodes.versionOf(want)} finds Node ${nodes.versionOf(onPath)} on PATH (${onPath})`);
  } else {
    const matrix = realpathSync(nodes.nodesDir);
    if (running.startsWith(matrix + '/')) out.push(`the system pass runs the matrix's Node ${runningVersion}`);
    if (onPath.startsWith(matrix + '/')) out.push(`the system pass finds the matrix's Node ${nodes.versionOf(onPath)} on PATH`);
  }
  return out;
}

test('the pinned Nodes are installed, each the version pinned', () => {
  const majors = Object.keys(nodes.NODES);
  assert.deepEqual(majors, ['22', '24', '26']);
  for (const [major, { version }] of Object.entries(nodes.NODES)) {
    assert.equal(version.split('.')[0], major);
    assert.equal(nodes.versionOf(nodes.nodeBinary(major)), version, `Node ${version}: build/node/${major} is not it (node scripts/nodes.mjs)`);
  }
});

test('this pass runs the Node it names', () => {
  assert.deepEqual(passProblems(process.env, process.execPath), []);
  const named = process.env.MIMALLOC_PPROF_TEST_NODE;
  if (named) assert.equal(process.version, `v${nodes.versionOf(named)}`);
});

test('control: a pass that ignores MIMALLOC_PPROF_TEST_NODE is caught, naming the versions', () => {
  // the PATH and Node of the system pass, with the variable set to each pinned Node
  const matrix = realpathSync(nodes.nodesDir);
  const systemPath = (process.env.PATH ?? '')
    .split(delimiter)
    .filter((d) => !d.startsWith(matrix + '/') && !d.startsWith(nodes.nodesDir + '/'))
    .join(delimiter);
  const system = nodeOnPath(systemPath);
  assert.notEqual(system, '', 'no system node on PATH');
  assert.deepEqual(passProblems({ PATH: systemPath }, system), []);
  for (const [major, { version }] of Object.entries(nodes.NODES)) {
    const bin = nodes.nodeBinary(major);
    const ignored = passProblems({ PATH: systemPath, MIMALLOC_PPROF_TEST_NODE: bin }, system);
    assert.equal(ignored.length, 2, ignored.join('\n'));
    assert.ok(ignored[0]!.startsWith(`the pass for Node ${version} runs Node ${nodes.versionOf(system)} `), ignored[0]);
    // PATH right but the runner not: still caught
    assert.equal(passProblems({ PATH: `${dirname(bin)}${delimiter}${systemPath}`, MIMALLOC_PPROF_TEST_NODE: bin }, system).length, 1);
  }
});

test('the one Node-API addon loads and reaches the preload library on every Node of the matrix', () => {
  const script = `const a = require(${JSON.stringify(addonPath())}); console.log(JSON.stringify({ v: process.version, ...a.available() }))`;
  for (const [major, { version }] of Object.entries(nodes.NODES)) {
    const r = spawnSync(nodes.nodeBinary(major), ['-e', script], { encoding: 'utf8', env: { ...process.env, LD_PRELOAD: libraryPath() } });
    assert.equal(r.status, 0, `Node ${version}: ${r.stderr}`);
    const got = JSON.parse(r.stdout) as { v: string; available: boolean; reason?: string };
    assert.equal(got.v, `v${version}`);
    assert.equal(got.available, true, `Node ${version}: ${got.reason}`);
  }
});
