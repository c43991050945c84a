/** native/src/fastmath.h, the sampler's ln and 1 - e^-t without libm, against libm.
 *
 * The bound: each function's series is cut where the next term is below 2^-56 of the sum,
 * and the result passes through at most four roundings, so its error stays within 4 units in
 * the last place of the correctly rounded value, and libm's own results (glibc's log and
 * expm1 are within 1 ulp) move that by one more. A relative error e in the interval draw or
 * the weight biases an estimate by e; 5 ulps is 1e-15, far below the 1e-3 that the sampling
 * tests resolve. The positive control is the same measure taken of two naive forms (ln through
 * a float, 1 - exp(-t) with its cancellation), which must fail the bound. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';

import { fixture, root, runTarget } from '../helpers.js';

const ULPS = 5;

interface Errors {
  ln_ulps: number;
  ln_worst: number;
  ln_naive_ulps: number;
  om_ulps: number;
  om_worst: number;
  om_naive_ulps: number;
  edges: boolean;
}

test('mp_ln and mp_one_minus_exp_neg stay within a few ulps of libm over their domains; naive forms do not', () => {
  const bin = fixture('fastmath', { flags: ['-O2', '-I', join(root, 'native', 'src')] });
  const r = runTarget(bin, []);
  assert.equal(r.status, 0, r.stderr);
  const e = JSON.parse(r.stdout) as Errors;
  assert.ok(e.ln_ulps <= ULPS, `ln: ${e.ln_ulps} ulps at ${e.ln_worst}`);
  assert.ok(e.om_ulps <= ULPS, `1 - e^-t: ${e.om_ulps} ulps at ${e.om_worst}`);
  assert.equal(e.edges, true, 'ln 1 = 0, and 1 - e^-t is 0 at 0 and NaN, 1 at infinity');
  // the control: the measure sees a form that loses bits
  assert.ok(e.ln_naive_ulps > ULPS, `the naive ln passed: ${e.ln_naive_ulps} ulps`);
  assert.ok(e.om_naive_ulps > ULPS, `the naive 1 - e^-t passed: ${e.om_naive_ulps} ulps`);
});
