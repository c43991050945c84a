/**
 * Periodic dumps in a directory shared with other processes (cluster workers, restarts):
 * rotation keeps this process's newest files and never touches another process's.
 */
import assert from 'node:assert/strict';
import { readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { root, runPreloaded, tempDir } from '../helpers.js';

test('rotation with keep=2 removes only this process\'s older dumps', () => {
  const dir = tempDir('mpp-dumps-');
  try {
    // another process's dumps, older than anything this one writes
    const others = [0, 1, 2, 3, 4].map((i) => `heap.999999.20200101T00000${i}.000Z.pb.gz`);
    for (const f of others) writeFileSync(join(dir, f), 'not read');
    const script = `
      import { startDumps } from ${JSON.stringify(join(root, 'dist', 'src', 'index.js'))};
      const d = startDumps({ dir: ${JSON.stringify(dir)}, keep: 2 });
      for (let i = 0; i < 4; i++) await d.dumpNow();
      d.stop();
      console.log(process.pid);
    `;
    const r = runPreloaded(process.execPath, ['--input-type=module', '-e', script]);
    assert.equal(r.status, 0, r.stderr);
    const pid = r.stdout.trim();
    const left = readdirSync(dir).sort();
    const mine = left.filter((f) => f.startsWith(`heap.${pid}.`));
    assert.equal(mine.length, 2, left.join(' ')); // 4 written, the 2 newest kept: rotation ran
    assert.deepEqual(left.filter((f) => !mine.includes(f)), others);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
