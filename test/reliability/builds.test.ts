/** The test builds behind the gates' controls cost the production library nothing: its
 * symbols and bytes carry no test hook (MP_TEST_*, mp_test_hook) and no sanitizer renaming
 * (mp_san_*), while the test-hooks build does carry its hooks (the check's positive control).
 * And the sanitizer build renames exactly the names the production library exports besides
 * its C API (mi_prof_*, mi_memory_*, mi_unwrapped_*), so no interposed name is left to replace
 * the sanitizer's allocator. */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { buildTestHooks, fileContains, productionDir, sanitizerBuild } from './util.js';

function symbols(lib: string, dynamic = false): string[] {
  const r = spawnSync('nm', [...(dynamic ? ['-D', '--defined-only'] : []), lib], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout
    .split('\n')
    .map((l) => l.trim().split(/\s+/).pop() ?? '')
    .filter(Boolean);
}

const HOOKS = ['MP_TEST_SKIP_THREAD_EXIT', 'MP_TEST_SKIP_FORK_HANDLERS', 'MP_TEST_LEAK'];

test('the production library carries no test hook and no sanitizer renaming; the test-hooks build carries its hooks', (t) => {
  const production = join(productionDir, 'libmimalloc-pprof.so');
  const prodSyms = symbols(production);
  assert.ok(prodSyms.includes('mp_alloc_slow'), 'nm sees the local symbols (the library is not stripped)');
  assert.deepEqual(prodSyms.filter((s) => /mp_test_|mp_san_/.test(s)), []);
  assert.ok(!fileContains(production, 'MP_TEST_'), 'an MP_TEST_ name is in the production library');
  const hooks = join(buildTestHooks(), 'libmimalloc-pprof.so');
  assert.ok(symbols(hooks).includes('mp_test_hook'), 'the test-hooks build has no mp_test_hook');
  for (const name of HOOKS) assert.ok(fileContains(hooks, name), `the test-hooks build lacks ${name}`);
  t.diagnostic(`production: ${prodSyms.length} symbols, none mp_test_*/mp_san_*, no MP_TEST_ bytes; test-hooks: mp_test_hook and ${HOOKS.join(', ')}`);
});

/** The library's own C API (profile.h, memory-events.h): exported, never renamed. */
const API = /^(mi_prof_|mi_memory_|mi_unwrapped_)/;

test('the sanitizer build renames every name the production library exports besides its C API', (t) => {
  const exported = symbols(join(productionDir, 'libmimalloc-pprof.so'), true)
    .filter((s) => !API.test(s))
    .sort();
  const renamed = readFileSync(sanitizerBuild('sanitize').syms, 'utf8')
    .trim()
    .split('\n')
    .map((l) => l.split(' '));
  assert.deepEqual(renamed.map(([from]) => from).sort(), exported);
  for (const [from, to] of renamed) assert.equal(to, `mp_san_${from}`);
  t.diagnostic(`${exported.length} interposed names renamed mp_san_* (malloc ... operator delete, pthread_create)`);
});
