/**
 * The check every Node profile the tests decode goes through (test/node-names.ts): at most
 * 1 % of its bytes beneath frames without a name. Positive control: a Node profile with 2 % of
 * its bytes under an address no symbol names fails it; 0.5 % passes; a C program's profile is
 * not a Node profile and is not checked.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { assertFewUnnamed, isNodeProfile, unnamedShares } from '../node-names.js';
import { makeProfile } from '../profile/util.js';

// values: alloc_objects, alloc_space, inuse_objects, inuse_space (makeProfile's order)
const profile = (unnamedBytes: number, leaf = 'node::Buffer::New') =>
  makeProfile({
    samples: [
      { stack: [leaf, 'main'], values: [1, 10_000 - unnamedBytes, 1, 10_000 - unnamedBytes] },
      { stack: [0x7f0000001234n, 'main'], values: [1, unnamedBytes, 1, unnamedBytes] },
    ],
  });

test('a Node profile with 2 % of its bytes under an unnamed frame fails the check; 0.5 % passes', () => {
  const bad = profile(200);
  assert.ok(isNodeProfile(bad));
  assert.equal(unnamedShares(bad).inuse_space, 0.02);
  assert.throws(() => assertFewUnnamed(bad, 'control'), /2\.00 % of \w+_space beneath frames without a name/);
  assert.doesNotThrow(() => assertFewUnnamed(profile(50), 'within the bound'));
});

test("a C program's profile is not a Node profile: not checked", () => {
  const c = profile(5_000, 'leak_here');
  assert.equal(isNodeProfile(c), false);
  assert.doesNotThrow(() => assertFewUnnamed(c, 'C'));
});

test("node's own code named by the file alone ([node]) counts as unnamed; a stripped library's [file] does not", () => {
  const node = makeProfile({
    samples: [
      { stack: ['[node]', 'main'], values: [1, 5_000, 1, 5_000] },
      { stack: ['[libvips-cpp.so.8.18.7]', 'main'], values: [1, 5_000, 1, 5_000] },
    ],
    mappings: [{ start: 0x400000, limit: 0x800000, file: '/usr/bin/node' }],
  });
  assert.ok(isNodeProfile(node), 'a profile that maps node is a Node profile, whatever its names');
  assert.equal(unnamedShares(node).inuse_space, 0.5);
  assert.throws(() => assertFewUnnamed(node, '[node]'), /50\.00 %/);
});
