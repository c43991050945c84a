/**
 * The checks every prebuilt binary passes before it is packed (scripts/prebuild.mjs
 * checkShipped), each shown to catch what it is for: a shared object without a build ID (which
 * profiles name binaries by), one that needs a library a slim system may lack, and one that
 * exports a name of the mimalloc it links in.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';

import { root, tempDir } from '../helpers.js';

// eslint-disable-next-line @typescript-eslint/no-unsafe-assignment
const { checkShipped, elfFacts } = (await import(join(root, 'scripts', 'prebuild.mjs'))) as {
  checkShipped(files: string[], archive: string): string | undefined;
  elfFacts(file: string): { buildId?: string; needed: string[]; exported: string[] };
};

function sharedObject(dir: string, name: string, source: string, flags: string[]): string {
  const out = join(dir, `${name}.so`);
  const r = spawnSync('cc', ['-shared', '-fPIC', '-x', 'c', '-', '-o', out, ...flags], { input: source, encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return out;
}

test('checkShipped passes a self-contained object with a build ID, and rejects each broken one', () => {
  const dir = tempDir('mpp-shipped-');
  // the "archive" whose names must stay hidden: an object defining mi_secret
  const archiveSrc = sharedObject(dir, 'archive', 'int mi_secret(void) { return 1; }\n', []);
  const good = sharedObject(dir, 'good', '#include <unistd.h>\nint mpp_visible(void) { return (int)getpid(); }\n', ['-Wl,--build-id']);
  assert.match(elfFacts(good).buildId ?? '', /^[0-9a-f]{16,}$/);
  assert.doesNotThrow(() => checkShipped([good], archiveSrc));
  const noId = sharedObject(dir, 'no-id', '#include <unistd.h>\nint mpp_visible(void) { return (int)getpid(); }\n', ['-Wl,--build-id=none']);
  assert.equal(elfFacts(noId).buildId, undefined);
  assert.throws(() => checkShipped([noId], archiveSrc), /has no build ID/);
  const leaks = sharedObject(dir, 'leaks', '#include <unistd.h>\nint mi_secret(void) { return (int)getpid(); }\n', ['-Wl,--build-id']);
  assert.throws(() => checkShipped([leaks], archiveSrc), /exports mimalloc's own names \(mi_secret/);
  const needsZ = sharedObject(dir, 'needs-z', '#include <unistd.h>\nint mpp_visible(void) { return (int)getpid(); }\n', ['-Wl,--build-id', '-Wl,--no-as-needed', '-lz']);
  assert.throws(() => checkShipped([needsZ], archiveSrc), /needs libz\.so\.1, which a slim system may lack/);
});

test('the production library and the addon of this build carry a build ID', () => {
  for (const f of ['libmimalloc-pprof.so', 'mimalloc_pprof.node']) assert.ok(elfFacts(join(root, 'build', f)).buildId, f);
});
