/** Concurrency: threads allocating, reallocating and freeing each other's blocks, some after
 * the allocating thread exited, while the profiler is dumped, reset, forked and restarted. */
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { fixture, pprofRaw, runPreloaded, stackHas, tempDir } from '../helpers.js';
import { mimallocDefectEnv, onMusl } from '../mimalloc.js';

interface StressOutput {
  ops: number;
  waves: number;
  dumps: number;
  forks: number;
  after: number;
  restarted: number;
}

const bin = () => fixture('stress', { libs: ['-ldl'] });

const stressEnv = mimallocDefectEnv();

function stress(mode: string[]): { out: StressOutput; dir: string; workerSamples: number } {
  const dir = tempDir();
  const r = runPreloaded(bin(), [dir, '2', ...mode], stressEnv, 60_000);
  assert.equal(r.status, 0, `status ${r.status} signal ${r.signal}: ${r.stderr}`);
  const out = JSON.parse(r.stdout) as StressOutput;
  const final = pprofRaw(join(dir, 'final.pb'), bin());
  const workerSamples = final.samples.filter((s) => stackHas(s, 'worker')).length;
  return { out, dir, workerSamples };
}

test('no crash, no hang, every dump valid, and no record outlives its block', () => {
  const { out, dir, workerSamples } = stress([]);
  assert.ok(out.ops > 10_000 && out.forks >= 1, JSON.stringify(out));
  assert.equal(workerSamples, 0, 'samples of freed blocks remain in the profile');
  assert.equal(out.restarted, 0, 'a restart must start from an empty profile');
  // every dump, the children's included, is complete and parses
  const files = readdirSync(dir).filter((f) => f.endsWith('.heap') || f.endsWith('.pb'));
  assert.ok(files.length >= out.dumps * 2 + out.forks);
  for (const f of files.filter((f) => f.endsWith('.pb')).slice(0, 3)) assert.ok(pprofRaw(join(dir, f), bin()).types.length === 4);
  assert.ok(!readdirSync(dir).some((f) => f.includes('.tmp.')), 'a temporary file was left behind');
});

// the control frees through mimalloc's own mi_free, which the musl build links in unexported
test('positive control: blocks freed behind the profiler stay in the profile', { skip: onMusl && "musl: the library links mimalloc in with its names hidden, so there is no mi_free to free behind the profiler's back" }, () => {
  const { workerSamples } = stress(['bypass']);
  assert.ok(workerSamples > 0, 'the leak gate did not see records of blocks freed behind its back');
});
