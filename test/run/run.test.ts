/**
 * `mimalloc-pprof run` end to end: a program in, a symbolised gzipped profile.proto out,
 * with the JavaScript functions that hold native memory named inside the native stacks.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';

import { pprofRaw, root, run, tempDir, terminateRunWhenReady, weight } from '../helpers.js';
import { decode } from './decode.js';

const cli = join(root, 'dist', 'src', 'cli', 'bin.js');
const fixtures = join(root, 'test', 'run', 'fixtures');

function mpp(args: string[], env: Record<string, string> = {}, cwd?: string) {
  return spawnSync(process.execPath, [cli, ...args], {
    encoding: 'utf8',
    env: { ...process.env, ...env },
    cwd,
    timeout: 180_000,
    maxBuffer: 64 << 20,
  });
}

describe('JavaScript frames in native stacks: the whole chain', () => {
  const chain = ['chainLeaf', 'chainMiddle', 'chainRoot'];
  const profile = (extra: string[]) => {
    const dir = tempDir();
    const out = join(dir, 'chain.pb.gz');
    const r = mpp(['run', '--interval', '16k', '--seed', '5', ...extra, '--out', out, '--', 'node', join(fixtures, 'js-chain.cjs')]);
    assert.equal(r.status, 0, r.stderr);
    const { size } = JSON.parse(r.stdout.trim().split('\n').pop() ?? '{}') as { size: number };
    return decode(out).samples.filter((s) => s.size === size);
  };
  /** Samples of the fixture's blocks whose stacks miss a function of the chain, or have it out of order. */
  const broken = (samples: ReturnType<typeof profile>) =>
    samples.filter((s) => {
      const at = chain.map((n) => s.names.indexOf(n));
      return at.some((i) => i < 0) || !(at[0]! < at[1]! && at[1]! < at[2]!);
    });

  test('every sample of the blocks carries chainLeaf, chainMiddle and chainRoot in order', (t) => {
    const samples = profile([]);
    t.diagnostic(`${samples.length} samples of the fixture's blocks, ${broken(samples).length} without the whole chain`);
    // 600 retained blocks of 65 KiB at R = 16 KiB: p = 0.98 each, in one or a few stacks
    const objects = samples.reduce((a, s) => a + s.inuseObjects, 0);
    t.diagnostic(`${objects} objects estimated in use (600 retained)`);
    assert.ok(samples.length >= 1 && objects > 500, `${samples.length} samples, ${objects} objects`);
    assert.deepEqual(broken(samples).map((s) => s.names.join(' < ')).slice(0, 3), []);
  });

  test('positive control: stacks cut to 6 frames (--bt-max 6) lose the chain', () => {
    const samples = profile(['--bt-max', '6']);
    assert.ok(samples.length >= 1);
    assert.ok(broken(samples).length === samples.length, 'the chain check passed with cut stacks');
  });
});

describe('a Node program: JavaScript functions named inside native stacks', () => {
  const dir = tempDir();
  const out = join(dir, 'retain.pb.gz');
  const interval = 16384;
  const r = mpp(['run', '--interval', '16k', '--seed', '9', '--out', out, '--', 'node', join(fixtures, 'retain.cjs')]);
  const expected = JSON.parse(r.stdout.trim().split('\n').pop() ?? '{}') as {
    slowBytes: number;
    jsonBytes: number;
    jsonSizes: number[];
  };

  test('run exits with the program status and writes one profile', () => {
    assert.equal(r.status, 0, r.stderr);
    assert.ok(existsSync(out), r.stderr);
    assert.match(r.stderr, /mimalloc-pprof: wrote /);
  });

  const { profile, str, samples } = decode(out);

  test('the profile is self-contained: four heap types, inuse_space by default, symbolised mappings', () => {
    assert.ok(
      profile.comment.map((c) => str(c)).some((c) => /^mimalloc-pprof \d+\.\d+\.\d+ run: interval=16384 seed=9 pid=\d+$/.test(c)),
      'a comment names the tool version, interval and seed',
    );
    // the process: its pid and when it began (a reused pid is another process for growth)
    const started = profile.comment.map((c) => str(c)).map((c) => /\bpid=\d+ .*\bstart_time=(\d+)/.exec(c)?.[1]).find((x) => x !== undefined);
    assert.ok(started !== undefined && Math.abs(Number(started) - Date.now()) < 3_600_000, `no start_time= near now: ${started}`);
    assert.deepEqual(
      profile.sampleType.map((t) => str(t.type)),
      ['alloc_objects', 'alloc_space', 'inuse_objects', 'inuse_space'],
    );
    assert.equal(str(profile.defaultSampleType), 'inuse_space');
    assert.ok(profile.mapping.some((m) => m.hasFunctions));
  });

  // The function's buffers in use, estimated from the native samples under it of a buffer's
  // size (every backing store here is 4 KiB or more; V8's record of each buffer, the
  // BackingStore, its extension and shared_ptr, are some 100-200 bytes, about 2 % of a JSON
  // buffer, and its JavaScript objects are heap=js samples: real memory the function holds,
  // but not the bytes the fixture can count), against what it retained. The model: each
  // sample of s bytes has p = 1 - exp(-s/R), and the fixture prints every block's size, so
  // the tolerance is 4 sigma of the Horvitz-Thompson estimate, which must fit in the 10 % the
  // product claims.
  // variance of one block of s bytes: s^2 (1 - p) / p = s^2 (w - 1), with w = 1/p
  const STORE_MIN = 4096;
  const under = (fn: string) => samples.filter((s) => s.names.includes(fn));
  const gate = (fn: string, blockSizes: number[], retained: number) => {
    const sigma = Math.sqrt(blockSizes.reduce((a, s) => a + s * s * (weight(s, interval) - 1), 0));
    const got = under(fn).filter((s) => s.heap === 'native' && s.size >= STORE_MIN).reduce((a, s) => a + s.inuse, 0);
    const rel = got / retained - 1;
    return {
      powerful: 4 * sigma <= 0.1 * retained,
      ok: Math.abs(got - retained) <= 4 * sigma && Math.abs(rel) <= 0.1,
      message: `${fn}: ${got} in use vs ${retained} retained (${(rel * 100).toFixed(2)} %, 4 sigma ${((400 * sigma) / retained).toFixed(2)} %)`,
    };
  };
  const check = (t: { diagnostic(m: string): void }, fn: string, blockSizes: number[], retained: number) => {
    const g = gate(fn, blockSizes, retained);
    t.diagnostic(g.message);
    const rest = (heap: string) => under(fn).filter((s) => s.heap === heap && (heap === 'js' || s.size < STORE_MIN)).reduce((a, s) => a + s.inuse, 0);
    t.diagnostic(`${fn} also holds: ${rest('native')} bytes of smaller native blocks, ${rest('js')} bytes of JavaScript heap`);
    assert.ok(g.powerful, `${fn}: the workload is too small for a 10 % claim`);
    assert.ok(g.ok, g.message);
  };

  test('retainSlowBuffers (interpreted) holds its bytes within 10 %', (t) => {
    check(t, 'retainSlowBuffers', Array(1000).fill(64 * 1024), expected.slowBytes);
  });

  test('retainJsonBuffers (optimised) holds its bytes within 10 %', (t) => {
    // the buffers' distinct backing stores (4000: the fixture keeps Buffer.poolSize at Node 20's)
    assert.ok(expected.jsonSizes.every((n) => n >= STORE_MIN), 'a JSON buffer below 4 KiB (pooled)');
    check(t, 'retainJsonBuffers', expected.jsonSizes, expected.jsonBytes);
  });

  test('JavaScript frames carry their file', () => {
    const s = samples.find((x) => x.names.includes('retainSlowBuffers'));
    assert.ok(s);
    assert.ok(s.files.some((f) => f.endsWith('retain.cjs')), s.files.join(','));
  });

  test('zlib state allocated on the pool threads is labelled so', () => {
    const zlib = samples.filter((s) => s.names.some((n) => /deflateInit|deflate_?init|ZlibContext::Init/.test(n)));
    assert.ok(zlib.length > 0, 'no zlib samples');
    for (const s of zlib) assert.equal(s.thread, 'libuv threadpool', s.names.join(' < '));
    assert.ok(samples.some((s) => s.thread === 'main'));
  });

  test("positive control: the gate rejects a function credited with another's bytes", () => {
    assert.equal(gate('retainJsonBuffers', expected.jsonSizes, expected.slowBytes).ok, false);
    assert.equal(gate('holdZlibStreams', Array(1000).fill(64 * 1024), expected.slowBytes).ok, false);
  });

  test('go tool pprof, with no binaries, shows the same JavaScript and C++ names', () => {
    const raw = pprofRaw(out, undefined, ['-symbolize=none']);
    const names = new Set(raw.samples.flatMap((s) => s.functions.flat()));
    for (const n of ['retainSlowBuffers', 'retainJsonBuffers']) assert.ok(names.has(n), `${n} missing`);
    assert.ok([...names].some((n) => n.startsWith('node::')), 'no demangled C++ name');
  });
});

describe('run on other kinds of programs', () => {
  test('a C program: its functions are named and its exit status is propagated', () => {
    const dir = tempDir();
    const bin = join(dir, 'demo');
    assert.equal(run('cc', ['-g', '-O1', join(root, 'examples', 'demo.c'), '-o', bin]).status, 0);
    const out = join(dir, 'c.pb.gz');
    const r = mpp(['run', '--interval', '64k', '--out', out, '--', bin]);
    assert.equal(r.status, 0, r.stderr);
    const { samples } = decode(out);
    // cache_response is static: named from .symtab, not .dynsym
    for (const fn of ['cache_response', 'handle_request', 'tokenize', 'main']) assert.ok(samples.some((s) => s.names.includes(fn)), fn);
    // strdup (glibc, no frame pointer) still shows its caller
    assert.ok(samples.some((s) => /strdup$/.test(s.names[0] ?? '') && s.names.includes('tokenize')));
    const failing = mpp(['run', '--', 'sh', '-c', 'exit 7']);
    assert.equal(failing.status, 7);
  });

  test('top-level ES-module code owns its allocations: 20 MiB under (top level) of app.mjs within 4 sigma and 10 %', () => {
    const dir = tempDir();
    const app = join(dir, 'app.mjs');
    const size = 65536;
    const count = 320; // 20 MiB
    writeFileSync(app, `globalThis.kept = [];\nfor (let i = 0; i < ${count}; i++) globalThis.kept.push(Buffer.allocUnsafeSlow(${size}));\n`);
    const out = join(dir, 'esm.pb.gz');
    const r = mpp(['run', '--interval', '32k', '--seed', '5', '--out', out, '--', 'node', app], {}, dir);
    assert.equal(r.status, 0, r.stderr);
    const { samples } = decode(out);
    const got = samples.filter((s) => s.names.some((n, i) => n === '(top level)' && s.files[i] === app)).reduce((a, s) => a + s.inuse, 0);
    const retained = size * count;
    // Horvitz-Thompson: each block's variance is s^2 (w - 1), w = 1/p
    const sigma = Math.sqrt(count * size * size * (weight(size, 32768) - 1));
    assert.ok(4 * sigma <= 0.1 * retained, 'the workload supports a 10 % claim');
    assert.ok(Math.abs(got - retained) <= 4 * sigma, `${got} under app.mjs top level vs ${retained} (4 sigma ${(4 * sigma).toFixed(0)})`);
    assert.match(r.stderr, new RegExp(`\\(top level\\) ${app.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}:1`), 'the JavaScript table names the module');
  });

  test('npx-launched node and a node-shebang script are profiled, JavaScript named', () => {
    const dir = tempDir();
    const script = join(dir, 'tool');
    writeFileSync(
      script,
      '#!/usr/bin/env node\nfunction keepBuffers(){const k=[];for(let i=0;i<400;i++)k.push(Buffer.allocUnsafeSlow(65536));return k}\nglobalThis.k=keepBuffers();\n',
    );
    chmodSync(script, 0o755);
    const out = join(dir, 'shebang.pb.gz');
    const r = mpp(['run', '--interval', '64k', '--out', out, '--', script]);
    assert.equal(r.status, 0, r.stderr);
    assert.ok(decode(out).samples.some((s) => s.names.includes('keepBuffers')));

    const out2 = join(dir, 'npx.pb.gz');
    const r2 = mpp(['run', '--interval', '64k', '--out', out2, '--', 'npx', '--no-install', 'node', join(dir, 'tool')], {}, dir);
    assert.equal(r2.status, 0, r2.stderr);
    const profiles = readdirSync(dir).filter((f) => f.startsWith('npx') && f.endsWith('.pb.gz'));
    assert.ok(profiles.length >= 2, `one profile per process: ${profiles.join(', ')}`);
    assert.ok(
      profiles.some((f) => decode(join(dir, f)).samples.some((s) => s.names.includes('keepBuffers'))),
      'the node process started by npx names keepBuffers',
    );
  });

  test('Node spawning Node: one profile per process, none overwritten', () => {
    const dir = tempDir();
    const out = join(dir, 'tree.pb.gz');
    const parent =
      "const {execFileSync}=require('node:child_process');" +
      "for(let i=0;i<2;i++)execFileSync(process.execPath,['-e','globalThis.k=Buffer.allocUnsafeSlow(1<<20)'],{stdio:'inherit'});";
    const r = mpp(['run', '--interval', '64k', '--out', out, '--', 'node', '-e', parent]);
    assert.equal(r.status, 0, r.stderr);
    const files = readdirSync(dir).filter((f) => f.endsWith('.pb.gz'));
    assert.equal(files.length, 3, files.join(', '));
    assert.ok(files.includes('tree.pb.gz'));
    for (const f of files) assert.ok(decode(join(dir, f)).profile.sample.length >= 0);
    assert.deepEqual(readdirSync(dir).filter((f) => f.includes('.tmp')), []);
  });

  const terminateWhenReady = (out: string, command: string[]) => terminateRunWhenReady(cli, out, command);

  test('SIGTERM is forwarded, the program ends by it, and a profile is still written', async () => {
    const out = join(tempDir(), 'term.pb.gz');
    const { code, stderr } = await terminateWhenReady(out, [
      'node',
      '-e',
      "globalThis.k=Buffer.allocUnsafeSlow(8<<20);console.log('ready');setInterval(()=>{},1000)",
    ]);
    assert.equal(code, 128 + 15, stderr);
    assert.ok(existsSync(out), stderr);
    assert.ok(decode(out).samples.some((s) => s.inuse >= 8 << 20), 'the 8 MiB buffer is in the profile');
  });

  test('SIGTERM to a C program: forwarded, the program ends by it, its profile is written', async () => {
    const dir = tempDir();
    const src = join(dir, 'sleeper.c');
    writeFileSync(
      src,
      '#include <stdio.h>\n#include <stdlib.h>\n#include <unistd.h>\n' +
        '__attribute__((noinline)) void hold(void){static void* p; p = malloc(8<<20); puts("ready"); fflush(stdout);}\n' +
        'int main(void){hold(); for(;;) pause();}\n',
    );
    const bin = join(dir, 'sleeper');
    assert.equal(run('cc', ['-g', src, '-o', bin]).status, 0);
    const out = join(dir, 'c-term.pb.gz');
    const { code, stderr } = await terminateWhenReady(out, [bin]);
    assert.equal(code, 128 + 15, stderr);
    assert.ok(decode(out).samples.some((s) => s.names.includes('hold') && s.inuse >= 8 << 20), stderr);
  });

  test('a static program: run says the preload did not take effect and fails', () => {
    const dir = tempDir();
    const src = join(dir, 's.c');
    writeFileSync(src, '#include <stdlib.h>\nint main(void){return malloc(10)==0;}\n');
    const bin = join(dir, 's');
    const cc = run('cc', ['-static', src, '-o', bin]);
    if (cc.status !== 0) return; // no static libc on this machine: nothing to test
    const r = mpp(['run', '--', bin]);
    assert.equal(r.status, 3, r.stderr); // the status README's exit codes give it
    assert.match(r.stderr, /did not take effect/);
  });

  test('--no-profile runs the program on mimalloc and writes nothing', () => {
    const dir = tempDir();
    const r = mpp(['run', '--no-profile', '--', 'node', '-e', 'console.log(1)'], {}, dir);
    assert.equal(r.status, 0, r.stderr);
    assert.deepEqual(readdirSync(dir), []);
  });
});
