/** Node itself under the preload: Buffers, zlib, JSON, crypto and worker_threads run on
 * mimalloc with profiling on, the process exits cleanly and its profile is written. */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { nodeMajor, parseHeapText, pprofRaw, root, runPreloaded, tempDir } from '../helpers.js';

const workload = join(root, 'test', 'node', 'fixtures', 'workload.mjs');

for (const format of ['text', 'proto'] as const) {
  test(`node runs under the preload and writes a ${format} profile at exit`, () => {
    const dir = tempDir();
    const r = runPreloaded(process.execPath, [workload], {
      MIMALLOC_PROF: '1',
      MIMALLOC_PROF_VERBOSE: '1',
      MIMALLOC_PROF_SAMPLE_INTERVAL: '65536',
      MIMALLOC_PROF_DUMP_AT_EXIT: join(dir, 'node.%p.prof'),
      MIMALLOC_PROF_DUMP_FORMAT: format,
      // Node frees its native memory in its teardown, before the preload's dump at exit: Node 20
      // leaves a dozen blocks, Node 22 on none; there the profile has what was allocated
      ...(nodeMajor >= 22 ? { MIMALLOC_PROF_ACCUM: '1' } : {}),
    });
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.signal, null);
    const out = JSON.parse(r.stdout) as { kept: number; fromWorker: number };
    assert.equal(out.fromWorker, 100 * 32 * 1024);
    // the preload really was active, and only its one verbose line was printed
    const lines = r.stderr.split('\n').filter((l) => l.startsWith('mimalloc-pprof:'));
    assert.equal(lines.length, 1, r.stderr);
    assert.match(lines[0]!, /interposer active; profiler running, interval 65536/);
    const files = readdirSync(dir);
    assert.equal(files.length, 1, `expected one profile, got ${files.join(', ')}`);
    const path = join(dir, files[0]!);
    assert.match(files[0]!, /^node\.\d+\.prof$/);
    assert.equal(statSync(path).mode & 0o777, 0o600);
    if (format === 'text') {
      const heap = parseHeapText(readFileSync(path, 'utf8'));
      assert.equal(heap.header.interval, 65536);
      assert.ok(heap.rows.length > 0);
      // what the workload kept (15 MiB) is freed by then: a few KiB in use on Node 20, none from
      // 22 on, where the allocated figures carry the run
      if (nodeMajor >= 22) assert.ok(heap.header.allocBytes > out.kept, `Node ${process.versions.node}: ${JSON.stringify(heap.header)}`);
      assert.ok(heap.maps.some((l) => l.includes('libmimalloc-pprof.so')));
    }
    const p = pprofRaw(path, format === 'text' ? process.execPath : undefined);
    assert.ok(p.samples.length > 0, 'pprof read no samples');
  });
}
