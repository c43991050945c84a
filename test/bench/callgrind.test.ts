/** The callgrind benchmark (bench/callgrind.mjs) runs and reports sane figures. Structure and
 * sanity only: the ratios themselves are recorded in bench/README.md, not asserted here. */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';

import { root } from '../helpers.js';

interface Configuration {
  id: string;
  label: string;
  perPair: number;
  ratio: number;
  ir: { n1: number; n2: number };
  objects: string[];
  where: { function: string; extraPerPair: number }[];
}

interface Report {
  n1: number;
  n2: number;
  quick: boolean;
  machine: { arch: string; cpu: string; mimalloc: { path: string; version: string } };
  preload: string;
  configurations: Configuration[];
  loop: { perPair: number };
  target: { ratio: number; stoppedRatio: number; met: boolean };
}

const IDS = ['glibc', 'mimalloc', 'forward', 'stopped', 'profiling', 'profiling-4k'] as const;

function hasValgrind(): boolean {
  return spawnSync('sh', ['-c', 'command -v valgrind'], { stdio: 'ignore' }).status === 0;
}

test('bench/callgrind.mjs --quick --json: every configuration, sane instructions per pair', { timeout: 120_000 }, () => {
  if (!hasValgrind()) {
    assert.fail('valgrind is not installed: the callgrind benchmark needs it (apt-get install valgrind; `npm test` installs it as root)');
  }
  const r = spawnSync(process.execPath, [join(root, 'bench', 'callgrind.mjs'), '--quick', '--json'], {
    cwd: root,
    encoding: 'utf8',
    timeout: 110_000,
    maxBuffer: 64 << 20,
  });
  if (r.error) throw r.error;
  assert.equal(r.status, 0, `bench/callgrind.mjs failed (${r.status}):\n${r.stderr}`);
  const report = JSON.parse(r.stdout) as Report;

  assert.equal(report.quick, true);
  assert.ok(report.n2 > report.n1 && report.n1 > 0, `iteration counts ${report.n1}, ${report.n2}`);
  assert.ok(report.machine.arch.length > 0 && report.machine.cpu.length > 0);
  assert.ok(report.machine.mimalloc.path.includes('libmimalloc'), report.machine.mimalloc.path);

  const byId = new Map(report.configurations.map((c) => [c.id, c]));
  for (const id of IDS) {
    const c = byId.get(id);
    assert.ok(c, `configuration ${id} missing from ${[...byId.keys()].join(', ')}`);
    assert.ok(Number.isFinite(c.perPair) && c.perPair > 0, `${id}: ${c.perPair} instructions per pair`);
    assert.ok(Number.isFinite(c.ratio) && c.ratio > 0, `${id}: ratio ${c.ratio}`);
    assert.ok(c.ir.n2 > c.ir.n1 && c.ir.n1 > 0, `${id}: Ir ${c.ir.n1}, ${c.ir.n2}`);
  }
  const get = (id: (typeof IDS)[number]): Configuration => byId.get(id)!;
  const plain = get('mimalloc');
  const stopped = get('stopped');

  // each configuration ran the allocator it names
  const mimallocObject = (o: string): boolean => /^libmimalloc\.so/.test(o);
  const preloadObject = (o: string): boolean => o === 'libmimalloc-pprof.so' || report.preload.endsWith(`/${o}`);
  assert.ok(!get('glibc').objects.some(mimallocObject), `glibc run loaded ${get('glibc').objects.join(', ')}`);
  assert.ok(plain.objects.some(mimallocObject), `plain run: ${plain.objects.join(', ')}`);
  assert.ok(!plain.objects.some(preloadObject), `plain run: ${plain.objects.join(', ')}`);
  assert.ok(get('forward').objects.includes('libforward.so'), `forward run: ${get('forward').objects.join(', ')}`);
  for (const id of ['stopped', 'profiling', 'profiling-4k'] as const) {
    assert.ok(get(id).objects.some(preloadObject), `${id} run: ${get(id).objects.join(', ')}`);
  }

  assert.ok(plain.perPair >= 10 && plain.perPair <= 500, `plain mimalloc: ${plain.perPair} instructions per pair`);
  assert.equal(plain.ratio, 1);
  assert.ok(stopped.perPair >= plain.perPair - 1, `stopped ${stopped.perPair} < plain ${plain.perPair} - 1`);
  for (const id of ['profiling', 'profiling-4k'] as const) {
    assert.ok(get(id).perPair >= stopped.perPair, `${id} ${get(id).perPair} < stopped ${stopped.perPair}`);
  }
  assert.ok(report.loop.perPair > 0 && report.loop.perPair < plain.perPair, `loop alone: ${report.loop.perPair}`);
  assert.equal(report.target.stoppedRatio, stopped.ratio);
  assert.equal(typeof report.target.met, 'boolean');
});
