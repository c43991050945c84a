/**
 * The JavaScript heap through the in-process API and the endpoints (src/node/js-heap.ts): with
 * start({ jsHeap: true }) profiles carry V8's sampling heap profile as heap=js samples; the
 * control in the same process is profile({ jsHeap: false }) and `?js=0`, which leave them out.
 * At R = 64 KiB the ~70 MB of objects are ~1 100 samples (3 % relative error): ±25 % of V8's
 * own used-heap growth is the acceptance bound, far outside sampling noise.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';
import { pathToFileURL } from 'node:url';
import { gunzipSync } from 'node:zlib';

import { Profile } from '../../src/profile/pprof.js';

import { libraryPath } from '../../src/preload/library.js';
import { root } from '../helpers.js';
import { assertFewUnnamed } from '../node-names.js';

/** Bytes in use under `fn`, by heap label. */
function byHeap(base64: string, fn: string): Record<string, number> {
  const p = Profile.decode(gunzipSync(Buffer.from(base64, 'base64')));
  assertFewUnnamed(p, `the in-process profile read for ${fn}`);
  const str = (i: number | bigint) => p.stringTable.strings[Number(i)] ?? '';
  const inuse = p.sampleType.findIndex((t) => str(t.type) === 'inuse_space');
  const fnIds = new Set(p.function.filter((f) => str(f.name) === fn).map((f) => Number(f.id)));
  const locs = new Set(p.location.filter((l) => l.line.some((x) => fnIds.has(Number(x.functionId)))).map((l) => Number(l.id)));
  const out: Record<string, number> = {};
  for (const s of p.sample) {
    if (!s.locationId.some((id) => locs.has(Number(id)))) continue;
    const heap = str(s.label.find((l) => str(l.key) === 'heap')?.str ?? 0) || '(none)';
    out[heap] = (out[heap] ?? 0) + Number(s.value[inuse]);
  }
  return out;
}

test('start({ jsHeap: true }): profile() and /debug/pprof/heap carry the objects as heap=js; jsHeap: false and ?js=0 leave them out', (t) => {
  const r = spawnSync(process.execPath, ['--expose-gc', '--perf-basic-prof', join(root, 'test', 'node', 'api-fixtures', 'js-heap.mjs')], {
    encoding: 'utf8',
    env: { ...process.env, LD_PRELOAD: libraryPath(), MIMALLOC_PROF: '1', MPP_INDEX: pathToFileURL(join(root, 'dist', 'src', 'index.js')).href },
    timeout: 120_000,
    maxBuffer: 256 << 20,
  });
  assert.equal(r.status, 0, r.stderr);
  const out = JSON.parse(r.stdout.trim().split('\n').pop() ?? '{}') as Record<'withJs' | 'withoutJs' | 'http' | 'httpNoJs', string> & { objectBytes: number };
  const api = byHeap(out.withJs, 'retainObjects');
  const http = byHeap(out.http, 'retainObjects');
  t.diagnostic(`V8's growth ${(out.objectBytes / 1e6).toFixed(1)} MB; profile(): ${JSON.stringify(api)}; /heap: ${JSON.stringify(http)}`);
  for (const [what, figures] of [['profile()', api], ['/debug/pprof/heap', http]] as const) {
    assert.ok(Math.abs((figures.js ?? 0) / out.objectBytes - 1) <= 0.25, `${what}: ${JSON.stringify(figures)} against ${out.objectBytes}`);
  }
  const none = [byHeap(out.withoutJs, 'retainObjects'), byHeap(out.httpNoJs, 'retainObjects')];
  t.diagnostic(`controls: ${JSON.stringify(none)}`);
  for (const figures of none) assert.ok((figures.js ?? 0) === 0 && (figures.native ?? 0) + (figures['(none)'] ?? 0) < 0.1 * out.objectBytes, JSON.stringify(figures));
});
