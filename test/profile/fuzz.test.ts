/**
 * The fuzz corpus, in-process: every generated input (≥ 10 000: malformed, truncated,
 * oversized) either parses to a valid profile, which the operations and writers then
 * handle, or is rejected with a one-line ProfileFormatError naming the input. Nothing else
 * escapes, nothing hangs, and the whole corpus runs in well under 30 s.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { MimallocPprofError, ProfileFormatError } from '../../src/errors.js';
import { encodeHeapText } from '../../src/profile/heap-text.js';
import { parseProfile } from '../../src/profile/parse.js';
import { encodeProfile } from '../../src/profile/proto.js';
import { top } from '../../src/profile/top.js';
import { validateProfile } from '../../src/profile/validate.js';
import { corpus } from './corpus.js';

export const FUZZ_COUNT = 10_500;

test(`fuzz corpus: ${FUZZ_COUNT} mutants either parse to a valid profile or throw ProfileFormatError`, (t) => {
  const started = performance.now();
  let parsed = 0;
  let rejected = 0;
  let slowest = { ms: 0, kind: '' };
  const byKind = new Map<string, [number, number]>();
  let exercised = 0;
  for (const input of corpus(FUZZ_COUNT)) {
    const t0 = performance.now();
    let ok = false;
    try {
      const p = parseProfile(input.data, 'fuzz.input');
      validateProfile(p, 'fuzz.input');
      ok = true;
      parsed++;
      if (parsed % 7 === 0) {
        // what the CLI does with a parsed profile must not throw anything but our errors
        exercised++;
        try {
          for (let i = 0; i < p.sampleType.length; i++) top(p, i, 10);
          const again = parseProfile(encodeProfile(p), 'fuzz.reencoded');
          assert.equal(again.sample.length, p.sample.length);
          encodeHeapText(p, 'fuzz.input');
        } catch (e) {
          if (!(e instanceof MimallocPprofError)) {
            assert.fail(`${input.kind}: a parsed profile made ${e instanceof Error ? e.stack : String(e)}`);
          }
        }
      }
    } catch (e) {
      if (!(e instanceof ProfileFormatError)) {
        assert.fail(`${input.kind}: threw ${e instanceof Error ? e.stack : String(e)}`);
      }
      assert.ok(e.message.startsWith('fuzz.input: '), e.message);
      assert.ok(!/[\r\n]/.test(e.message), `${input.kind}: multi-line message ${JSON.stringify(e.message)}`);
      rejected++;
    }
    const ms = performance.now() - t0;
    if (ms > slowest.ms) slowest = { ms, kind: input.kind };
    const base = input.kind.split(': ')[1]!.split(' + ')[0]!;
    const c = byKind.get(base) ?? [0, 0];
    c[ok ? 0 : 1]++;
    byKind.set(base, c);
  }
  const total = performance.now() - started;
  t.diagnostic(`${parsed} parsed, ${rejected} rejected, ${exercised} exercised in ${(total / 1000).toFixed(1)} s; slowest ${slowest.ms.toFixed(0)} ms (${slowest.kind})`);
  t.diagnostic([...byKind].map(([k, [a, b]]) => `${k}: ${a}/${b}`).join('; '));
  assert.ok(parsed + rejected >= 10_000);
  assert.ok(parsed > 100 && rejected > 5000, 'both outcomes are exercised');
  assert.ok(slowest.ms < 3000, `no input takes seconds (${slowest.kind}: ${slowest.ms} ms)`);
  assert.ok(total < 30_000, `the corpus runs well under 30 s (${total} ms)`);
});
