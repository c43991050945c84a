/**
 * The JavaScript heap names the functions the JIT inlined (issue 29 (2)): V8's sampling heap
 * profiler records physical frames, so a small hot function that TurboFan inlined into its
 * caller has its objects charged to the caller. Under `run` each of V8's samples keeps the
 * native stack where it was taken (native/src/jsanchor.c, src/profile/js-anchors.ts), named as
 * the native stacks are, inlined functions included.
 *
 * The fixture keeps a Map that grows in `remember`, inlined into `handle`. The share of the
 * JavaScript heap under handle that is under remember: the Map's table and its keys are all
 * remember's (handle allocates nothing of its own), so the share is 1 up to the samples taken
 * before TurboFan inlined it (there, remember is a frame of its own: still remember's). The
 * bound 0.9 leaves room for samples V8 takes inside its own builtins' frames; the control,
 * V8's own stacks (MIMALLOC_PPROF_JS_ANCHORS=0), charges most of it to handle and the Map's
 * builtin (0.0-0.1 measured here).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';

import { liveAnchors } from '../../src/node/js-anchors-read.cjs';
import { root, tempDir } from '../helpers.js';
import { decode } from './decode.js';

const cli = join(root, 'dist', 'src', 'cli', 'bin.js');
const fixture = join(root, 'test', 'run', 'fixtures', 'js-inlined-map.cjs');

function profileOf(env: Record<string, string>) {
  const dir = tempDir('mpp-jsinl-');
  const out = join(dir, 'p.pb.gz');
  const r = spawnSync(process.execPath, [cli, 'run', '--interval', '64k', '--out', out, '--', 'node', fixture], {
    encoding: 'utf8',
    env: { ...process.env, ...env },
    timeout: 120_000,
  });
  assert.equal(r.status, 0, r.stderr);
  const d = decode(out);
  const js = d.samples.filter((s) => s.heap === 'js');
  const under = (name: string) => js.filter((s) => s.names.includes(name)).reduce((a, s) => a + s.inuse, 0);
  const comments = d.profile.comment.map((c) => d.str(c));
  return { remember: under('remember'), handle: under('handle'), js, comments };
}

test("TurboFan inlines the fixture's remember into handle (the premise)", () => {
  const r = spawnSync(process.execPath, ['--trace-turbo-inlining', fixture], { encoding: 'utf8', timeout: 60_000 });
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /^Inlining .*<SharedFunctionInfo remember>\} into .*<SharedFunctionInfo handle>\}/m);
});

test('the JavaScript heap under the inlined remember: its Map, with handle above it; dead samples leave no anchor', (t) => {
  const p = profileOf({});
  const share = p.remember / p.handle;
  t.diagnostic(`JS heap under handle ${p.handle} B, of which under remember ${p.remember} B (${(share * 100).toFixed(1)} %)`);
  const line = p.comments.find((c) => /^heap=js: \d+ of \d+ samples with the native stack/.test(c));
  t.diagnostic(line ?? 'no anchor comment');
  assert.ok(p.handle > 4 << 20, `the fixture's Map is ${p.handle} bytes`);
  assert.ok(share >= 0.9, `remember holds ${(share * 100).toFixed(1)} % of handle's JavaScript heap`);
  // handle right above remember (in one location when inlined: the same stack order)
  const order = p.js.filter((s) => s.names.includes('remember')).every((s) => s.names.indexOf('handle') === s.names.indexOf('remember') + 1);
  assert.ok(order, 'handle is the caller right above remember');
  // the samples V8 dropped (the churn's garbage) took their anchors with them: live anchors
  // stay near V8's live samples while many more were made
  const m = /(\d+) of (\d+) samples .*made=(\d+) live=(\d+) dropped=(\d+)/.exec(line ?? '');
  assert.ok(m, 'the anchors comment');
  const [kept, samples, made, live] = [m[1], m[2], m[3], m[4]].map(Number) as [number, number, number, number];
  assert.ok(kept >= 0.9 * samples, `${kept} of ${samples} samples anchored`);
  assert.ok(made >= 2 * samples, `the churn made ${made} samples for ${samples} live`);
  assert.ok(live <= samples + 64, `${live} anchors live for ${samples} live samples: deletes forget them`);
});

test("control: V8's own stacks (MIMALLOC_PPROF_JS_ANCHORS=0) charge the Map to handle", (t) => {
  const p = profileOf({ MIMALLOC_PPROF_JS_ANCHORS: '0' });
  const share = p.remember / p.handle;
  t.diagnostic(`control: under remember ${(share * 100).toFixed(1)} % of handle's JavaScript heap`);
  assert.ok(share < 0.5, `remember holds ${(share * 100).toFixed(1)} % without anchors`);
  assert.ok(!p.comments.some((c) => /samples with the native stack/.test(c)), 'no anchors used');
});

test('anchors are used only when each live sample reads back its own sample_id', () => {
  const words = (entries: [number, number, number[]][]) => {
    const w: bigint[] = [];
    for (const [seq, id, frames] of entries) w.push(BigInt(seq), BigInt(id), 100n, BigInt(frames.length), ...frames.map(BigInt));
    w.push(BigInt(entries.length), BigInt(entries.length), 0n);
    return BigUint64Array.from(w);
  };
  const ok = liveAnchors(words([[1, 1, [0x1000, 0x2000]], [2, 2, [0x3000]]]), [{ ordinal: 2 }]);
  assert.equal(ok.refused, undefined);
  assert.deepEqual(ok.frames, { 2: ['3000'] });
  // control: one live sample whose object says another id (a V8 with another layout)
  const bad = liveAnchors(words([[1, 1, [0x1000]], [2, 7, [0x3000]]]), [{ ordinal: 1 }, { ordinal: 2 }]);
  assert.match(bad.refused ?? '', /anchor 2 reads sample_id 7/);
  assert.deepEqual(bad.frames, {});
  // a dead one may read anything: not looked at
  assert.equal(liveAnchors(words([[1, 9, [0x1000]], [2, 2, [0x3000]]]), [{ ordinal: 2 }]).refused, undefined);
});
