/**
 * Node on arm64 (scripts/test-arm64.mjs only: the official arm64 Node 24 under qemu-aarch64, the
 * preload library and the addon built for aarch64 into build/linux-arm64). `run` itself runs on
 * this machine's Node and starts the arm64 Node through the emulator, which hands LD_PRELOAD and
 * the rest of the environment to the program it runs:
 *  - the CLI run by an arm64 Node finds the arm64 library (`mimalloc-pprof lib`);
 *  - native memory held three JavaScript calls deep is charged to those functions (±10 %);
 *  - memory allocated on libuv's pool threads is charged to the JavaScript that queued the work;
 *  - SIGTERM to a busy arm64 Node under `run` ends it by the signal (143), with its profile.
 * Each has a positive control that the same check rejects.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';

import { root, tempDir, terminateRunWhenReady } from '../helpers.js';
import { execWrapper } from '../mimalloc.js';
import { decode, type DecodedSample } from '../run/decode.js';

const cli = join(root, 'dist', 'src', 'cli', 'bin.js');
const fixtures = join(root, 'test', 'run', 'fixtures');
const arm64Node = process.env.MIMALLOC_PPROF_TEST_ARM64_NODE ?? '';
if (arm64Node === '' || execWrapper.length === 0) throw new Error('run by scripts/test-arm64.mjs (MIMALLOC_PPROF_TEST_ARM64_NODE and the emulator are unset)');
const node = [...execWrapper, arm64Node];

function mpp(args: string[], env: Record<string, string> = {}) {
  return spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8', cwd: root, env: { ...process.env, ...env }, timeout: 240_000, maxBuffer: 64 << 20 });
}

function profile(fixture: string, extra: string[], env: Record<string, string> = {}): DecodedSample[] {
  const out = join(tempDir('mpp-arm64-'), 'p.pb.gz');
  const r = mpp(['run', ...extra, '--top', '0', '--out', out, '--', ...node, join(fixtures, fixture)], env);
  assert.equal(r.status, 0, r.stderr);
  return decode(out).samples;
}

test('the CLI run by the arm64 Node prints the arm64 library; this machine\'s Node its own', () => {
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== 'MIMALLOC_PPROF_LIB'));
  const arm = spawnSync(node[0]!, [...node.slice(1), cli, 'lib'], { encoding: 'utf8', env: clean, timeout: 120_000 });
  assert.equal(arm.status, 0, arm.stderr);
  assert.equal(arm.stdout.trim(), join(root, 'build', 'linux-arm64', 'libmimalloc-pprof.so'));
  const r = spawnSync('readelf', ['-h', arm.stdout.trim()], { encoding: 'utf8' });
  assert.match(r.stdout, /Machine:\s+AArch64/);
  // control: the same command on this machine's Node names another file (the choice is the Node's)
  const host = spawnSync(process.execPath, [cli, 'lib'], { encoding: 'utf8', env: clean });
  assert.notEqual(host.stdout.trim(), arm.stdout.trim());
});

describe('native memory under JavaScript functions on arm64 Node 24', () => {
  const chain = ['chainLeaf', 'chainMiddle', 'chainRoot'];
  const SIZE = 66771;
  const KEPT = 600;
  const under = (samples: DecodedSample[]) =>
    samples
      .filter((s) => s.size === SIZE)
      .filter((s) => {
        const at = chain.map((n) => s.names.indexOf(n));
        return at.every((i) => i >= 0) && at[0]! < at[1]! && at[1]! < at[2]!;
      })
      .reduce((a, s) => a + s.inuse, 0);

  test('the bytes held under chainLeaf < chainMiddle < chainRoot are within 10 % of what it keeps', (t) => {
    const got = under(profile('js-chain.cjs', ['--interval', '16k', '--seed', '5']));
    const truth = SIZE * KEPT;
    t.diagnostic(`${(got / 1048576).toFixed(2)} MiB under the chain, ${(truth / 1048576).toFixed(2)} MiB kept`);
    assert.ok(Math.abs(got - truth) <= 0.1 * truth, `${got} against ${truth}`);
  });

  test('positive control: stacks cut to 6 frames (--bt-max 6) hold nothing under the chain', () => {
    assert.equal(under(profile('js-chain.cjs', ['--interval', '16k', '--seed', '5', '--bt-max', '6'])), 0);
  });
});

describe('libuv pool threads on arm64 Node 24', () => {
  const QUEUED_BY = '[queued by]';
  const zlib = (s: DecodedSample) => s.names.some((n) => n.includes('AllocForZlib'));
  const share = (samples: DecodedSample[]) => {
    const chosen = samples.filter(zlib);
    const total = chosen.reduce((a, s) => a + s.inuse, 0);
    const under = chosen
      .filter((s) => s.names.includes(QUEUED_BY) && s.names.indexOf('openStreams') > s.names.indexOf(QUEUED_BY))
      .reduce((a, s) => a + s.inuse, 0);
    return { total, share: total > 0 ? under / total : 0 };
  };

  test('>= 90 % of the zlib state allocated on pool threads is under openStreams; the control (MIMALLOC_PPROF_POOL=0) has none', (t) => {
    const on = share(profile('pool-zlib.cjs', ['--interval', '32k'], { STREAMS: '100' }));
    t.diagnostic(`zlib state ${(on.total / 1048576).toFixed(1)} MiB, ${(on.share * 100).toFixed(1)} % under openStreams`);
    assert.ok(on.total > 10 * 1048576 && on.share >= 0.9, `${(on.share * 100).toFixed(1)} % of ${on.total}`);
    const off = share(profile('pool-zlib.cjs', ['--interval', '32k'], { STREAMS: '100', MIMALLOC_PPROF_POOL: '0' }));
    t.diagnostic(`control: ${(off.share * 100).toFixed(1)} %`);
    assert.ok(off.total > 10 * 1048576 && off.share < 0.1, `control: ${(off.share * 100).toFixed(1)} % of ${off.total}`);
  });
});

describe('signals on arm64 Node 24', () => {
  const terminateWhenReady = (out: string, script: string) => terminateRunWhenReady(cli, out, [...node, '-e', script]);

  test('SIGTERM to a busy arm64 Node under run: 143, and its profile holds the 8 MiB buffer', async () => {
    const out = join(tempDir('mpp-arm64-'), 'term.pb.gz');
    // busy: a JavaScript loop allocating, never idle in the event loop
    const { code, stderr } = await terminateWhenReady(
      out,
      "globalThis.k=Buffer.allocUnsafeSlow(8<<20);console.log('ready');let a=[];for(;;){a.push(Buffer.alloc(4096));if(a.length>1000)a=[];}",
    );
    assert.equal(code, 128 + 15, stderr);
    assert.ok(existsSync(out), stderr);
    assert.ok(decode(out).samples.some((s) => s.inuse >= 8 << 20), 'the 8 MiB buffer is in the profile');
  });
});

describe('the JavaScript heap on arm64 Node 24', () => {
  // test/run/js-heap-inlined.test.ts on arm64: a Map kept by `remember`, which TurboFan
  // inlines into `handle`; V8's samples take the native stacks where it took them
  const share = (samples: DecodedSample[]) => {
    const js = samples.filter((s) => s.heap === 'js');
    const under = (name: string) => js.filter((s) => s.names.includes(name)).reduce((a, s) => a + s.inuse, 0);
    return { handle: under('handle'), share: under('handle') > 0 ? under('remember') / under('handle') : 0 };
  };

  test("an inlined function's Map is under it (>= 90 %); V8's own stacks (MIMALLOC_PPROF_JS_ANCHORS=0) charge it to the caller", (t) => {
    const on = share(profile('js-inlined-map.cjs', ['--interval', '64k']));
    t.diagnostic(`under handle ${(on.handle / 1048576).toFixed(1)} MiB, ${(on.share * 100).toFixed(1)} % under remember`);
    assert.ok(on.handle > 4 << 20 && on.share >= 0.9, `${(on.share * 100).toFixed(1)} % of ${on.handle}`);
    const off = share(profile('js-inlined-map.cjs', ['--interval', '64k'], { MIMALLOC_PPROF_JS_ANCHORS: '0' }));
    t.diagnostic(`control: ${(off.share * 100).toFixed(1)} %`);
    assert.ok(off.share < 0.5, `control: ${(off.share * 100).toFixed(1)} %`);
  });
});
