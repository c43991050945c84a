/**
 * Buckets keep how far V8's perf map had been written when they were made (jitmap.c), and the
 * proto dump carries it as each sample's jit_map_bytes label: under MIMALLOC_PROF_PERF_MAP a
 * Node process's samples have it, each within the map's final size; the control without the
 * variable has none. A process without a map (a C program) has none either, and runs as ever.
 * The in-process API asks for the same (mi_prof_jit_map_track) when profiler.start() finds the
 * process's perf map: its samples are labelled without the variable; the control starts the
 * profiler through the addon alone, and has none.
 */
import assert from 'node:assert/strict';
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { Profile } from '../../src/profile/pprof.js';

import { fixture, root, runPreloaded, targetNode, tempDir } from '../helpers.js';
import { MUSL_NO_NODE, mimallocLabel, onMusl } from '../mimalloc.js';

const script =
  'const keep = []; function fill(n) { for (let i = 0; i < n; i++) keep.push(Buffer.alloc(64 << 10, i)); }' +
  'for (let r = 0; r < 20; r++) fill(20); console.log(process.pid);';

/** The same work started by the in-process API (`api`: profiler.start(); `addon`: the addon's
 * start alone), its raw proto dumped through the addon. */
const apiScript = (how: 'api' | 'addon', out: string) =>
  `const { withAddon } = await import(${JSON.stringify(join(root, 'dist', 'src', 'node', 'addon.js'))});` +
  `const { profiler } = await import(${JSON.stringify(join(root, 'dist', 'src', 'node', 'profiler.js'))});` +
  (how === 'api' ? 'profiler.start({ interval: 65536, accum: true });' : 'withAddon((a) => a.start({ interval: 65536, accum: true }));') +
  script + `withAddon((a) => a.dump(${JSON.stringify(out)}, 'proto', false));`;

function nodeRun(perfMap: boolean, api?: 'api' | 'addon') {
  const dir = tempDir('mpp-jitmap-');
  const out = join(dir, 'raw.pb');
  const r = runPreloaded(targetNode, ['--perf-basic-prof', ...(api ? ['--input-type=module', '-e', apiScript(api, out)] : ['-e', script])], api ? {} : {
    MIMALLOC_PROF: '1',
    MIMALLOC_PROF_ACCUM: '1',
    MIMALLOC_PROF_SAMPLE_INTERVAL: '65536',
    MIMALLOC_PROF_DUMP_FORMAT: 'proto',
    MIMALLOC_PROF_DUMP_AT_EXIT: out,
    ...(perfMap ? { MIMALLOC_PROF_PERF_MAP: '1' } : {}),
  });
  assert.equal(r.status, 0, r.stderr);
  const pid = Number(r.stdout.trim());
  const mapPath = `/tmp/perf-${pid}.map`;
  const mapBytes = readFileSync(mapPath).length;
  rmSync(mapPath, { force: true });
  const p = Profile.decode(readFileSync(out));
  rmSync(dir, { recursive: true, force: true });
  const key = p.stringTable.strings.indexOf('jit_map_bytes');
  const labelOf = (s: (typeof p.sample)[number]) => s.label.find((l) => key >= 0 && Number(l.key) === key)?.num;
  // a frame in no file is JIT code, which V8 makes only after it opened its map
  const fileBacked = new Set(p.mapping.filter((m) => (p.stringTable.strings[Number(m.filename)] ?? '').startsWith('/')).map((m) => Number(m.id)));
  const locs = new Map(p.location.map((l) => [Number(l.id), l]));
  const jit = p.sample.filter((s) => s.locationId.some((id) => !fileBacked.has(Number(locs.get(Number(id))?.mappingId ?? 0))));
  const labels = p.sample.map(labelOf).filter((v) => v !== undefined).map(Number);
  return { samples: p.sample.length, jit: jit.length, jitLabelled: jit.filter((s) => labelOf(s) !== undefined).length, labels, mapBytes };
}

test(`a Node process's samples carry the perf map's size at their making (${mimallocLabel})`, { skip: onMusl && MUSL_NO_NODE }, () => {
  const on = nodeRun(true);
  assert.ok(on.samples > 50, `${on.samples} samples`);
  assert.ok(on.jit >= 20, `${on.jit} samples with JIT frames`);
  assert.equal(on.jitLabelled, on.jit, 'every sample with a JIT frame is labelled');
  assert.ok(on.labels.every((b) => b > 0 && b <= on.mapBytes), `labels within (0, ${on.mapBytes}]`);
  assert.ok(new Set(on.labels).size > 1, 'the map grew while the program ran');
  // the control: without MIMALLOC_PROF_PERF_MAP nothing is read or written
  const off = nodeRun(false);
  assert.ok(off.samples > 50);
  assert.equal(off.labels.length, 0);
});

test(`the in-process API labels its samples where the process has a perf map; the addon's start alone does not (control) (${mimallocLabel})`, { skip: onMusl && MUSL_NO_NODE }, () => {
  const on = nodeRun(false, 'api');
  // every sample is labelled (its bucket was made after the start), those with JIT frames too
  assert.ok(on.samples >= 5, `${on.samples} samples`);
  assert.ok(on.jit >= 1, `${on.jit} samples with JIT frames`);
  assert.equal(on.jitLabelled, on.jit, 'every sample with a JIT frame is labelled');
  assert.equal(on.labels.length, on.samples, `${on.labels.length} of ${on.samples} samples labelled`);
  assert.ok(on.labels.every((b) => b > 0 && b <= on.mapBytes), `labels within (0, ${on.mapBytes}]`);
  const off = nodeRun(false, 'addon');
  assert.ok(off.samples >= 5, `${off.samples} samples (control)`);
  assert.equal(off.labels.length, 0);
});

test('a process without a perf map: no label, same exit', () => {
  const dir = tempDir('mpp-jitmap-c-');
  try {
    const out = join(dir, 'sites.pb');
    const r = runPreloaded(fixture('sites'), [join(dir, 'sites.heap'), out, '1'], {
      MIMALLOC_PROF: '1',
      MIMALLOC_PROF_PERF_MAP: '1',
      MIMALLOC_PROF_SAMPLE_INTERVAL: '4096',
    });
    assert.equal(r.status, 0, r.stderr);
    const p = Profile.decode(readFileSync(out));
    assert.ok(p.sample.length > 0);
    const key = p.stringTable.strings.indexOf('jit_map_bytes');
    assert.ok(p.sample.every((s) => s.label.every((l) => Number(l.key) !== key)));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
