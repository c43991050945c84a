/**
 * The profiler's numbers against the truth, read back with the real google/pprof.
 * Every tolerance is derived from the sampling model: a sample of s bytes is taken with
 * p = 1 - exp(-s/R) independently per block (disjoint stretches of a Poisson process), so
 * the Horvitz-Thompson estimate of in-use bytes has variance sum s^2 (1-p)/p over live
 * blocks; the fixtures compute that sum for their own blocks. Bounds are 4 sigma (two-sided
 * false alarm < 1e-4 per check under a normal approximation). Each gate is also shown to
 * reject a known-biased estimator computed from the same runs (its positive control).
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';

import {
  fixture,
  parseHeapText,
  pprofRaw,
  run,
  runPreloaded,
  sampleValue,
  stackHas,
  symbolizeWithNm,
  tempDir,
  weight,
  type RawProfile,
} from '../helpers.js';
import { MUSL_NO_CXX, onMusl } from '../mimalloc.js';

const SITES = ['site_tiny', 'site_mixed', 'site_large', 'site_huge'] as const;

interface SitesOutput {
  interval: number;
  sites: Record<(typeof SITES)[number], { bytes: number; variance: number }>;
  estimated_live_bytes: number;
  exact_live_bytes: number;
  live_samples: number;
  dropped_samples: number;
}

function inuseType(p: RawProfile): string {
  return p.types.includes('inuse_space') ? 'inuse_space' : 'space';
}

function total(p: RawProfile, type = inuseType(p)): number {
  return p.samples.reduce((sum, s) => sum + sampleValue(p, s, type), 0);
}

function bySite(p: RawProfile, value: (s: RawProfile['samples'][number]) => number): Record<string, number> {
  const out: Record<string, number> = {};
  for (const site of SITES) out[site] = 0;
  for (const s of p.samples) for (const site of SITES) if (stackHas(s, site)) out[site]! += value(s);
  return out;
}

describe('known allocation sites, read by go tool pprof', () => {
  const dir = tempDir();
  const bin = fixture('sites');
  const textPath = join(dir, 'sites.heap');
  const protoPath = join(dir, 'sites.pb');
  const r = runPreloaded(bin, [textPath, protoPath, '1'], {
    MIMALLOC_PROF: '1',
    MIMALLOC_PROF_SAMPLE_INTERVAL: '16384',
    MIMALLOC_PROF_SEED: '11',
    MIMALLOC_MEMORY_EVENTS: '1',
  });
  assert.equal(r.status, 0, r.stderr);
  const out = JSON.parse(r.stdout) as SitesOutput;
  const proto = pprofRaw(protoPath, bin);
  const text = pprofRaw(textPath, bin);
  const knownTotal = SITES.reduce((a, s) => a + out.sites[s].bytes, 0);
  const varTotal = SITES.reduce((a, s) => a + out.sites[s].variance, 0);

  test('both formats parse and name every allocating function', () => {
    assert.deepEqual(proto.types, ['alloc_objects', 'alloc_space', 'inuse_objects', 'inuse_space']);
    assert.equal(proto.defaultType, 'inuse_space');
    assert.equal(proto.period, 16384);
    assert.deepEqual(text.types, ['objects', 'space']);
    for (const p of [proto, text]) {
      for (const site of SITES) assert.ok(p.samples.some((s) => stackHas(s, site)), `${site} missing`);
      assert.ok(p.samples.every((s) => stackHas(s, 'main')), 'every stack reaches main');
    }
    assert.equal(out.dropped_samples, 0);
  });

  test('text, proto and the in-process estimate are the same numbers', () => {
    // pprof truncates each text row and we round each proto row: at most one byte per row.
    const rows = proto.samples.length;
    assert.ok(Math.abs(total(proto) - out.estimated_live_bytes) <= rows, `${total(proto)} vs ${out.estimated_live_bytes}`);
    assert.ok(Math.abs(total(text) - out.estimated_live_bytes) <= rows, `${total(text)} vs ${out.estimated_live_bytes}`);
    const header = parseHeapText(readFileSync(textPath, 'utf8'));
    assert.equal(header.header.interval, 16384);
    assert.equal(header.header.inuseCount, out.live_samples);
  });

  test('the estimated total agrees with the exact counters', (t) => {
    // exact = known sites + other live blocks (libc, stdio); those others are estimated too,
    // with variance at most (their bytes) * R, and may differ from their usable size by at most
    // their own size.
    const other = Math.max(0, out.exact_live_bytes - knownTotal);
    const sigma = Math.sqrt(varTotal + other * out.interval);
    const err = total(proto) - out.exact_live_bytes;
    t.diagnostic(`total: estimate ${total(proto)} vs exact ${out.exact_live_bytes} (${((100 * err) / out.exact_live_bytes).toFixed(2)} %, ${(err / sigma).toFixed(2)} sigma)`);
    assert.ok(Math.abs(err) <= 4 * sigma + other, `error ${err}, 4 sigma ${4 * sigma}, other ${other}`);
  });

  // Share of site i: X_i / T. Its relative error is about e_i - e_T, with variance
  // v_i/B_i^2 + v_T/T^2 - 2 v_i/(B_i T), since cov(X_i, T) = v_i.
  const shareSigma = (site: (typeof SITES)[number]) => {
    const { bytes, variance } = out.sites[site];
    return Math.sqrt(variance / bytes ** 2 + varTotal / knownTotal ** 2 - (2 * variance) / (bytes * knownTotal));
  };
  const shareErrors = (estimate: Record<string, number>) => {
    const estTotal = SITES.reduce((a, s) => a + estimate[s]!, 0);
    return SITES.map((site) => {
      const rel = estimate[site]! / estTotal / (out.sites[site].bytes / knownTotal) - 1;
      return { site, rel, sigma: shareSigma(site) };
    });
  };

  test('each site holds its share within 10 % (and within 4 sigma)', (t) => {
    for (const { site, rel, sigma } of shareErrors(bySite(proto, (s) => sampleValue(proto, s, 'inuse_space')))) {
      t.diagnostic(`${site}: share off by ${(rel * 100).toFixed(2)} % (4 sigma ${(400 * sigma).toFixed(2)} %)`);
      assert.ok(4 * sigma <= 0.1, `${site}: the workload is too small for a 10 % claim (4 sigma = ${4 * sigma})`);
      assert.ok(Math.abs(rel) <= 4 * sigma, `${site}: share off by ${(rel * 100).toFixed(2)} %, 4 sigma ${(4 * sigma * 100).toFixed(2)} %`);
      assert.ok(Math.abs(rel) <= 0.1, `${site}: share off by ${(rel * 100).toFixed(2)} %`);
    }
  });

  test('positive control: raw sampled bytes (no unsampling) fail the share gate', () => {
    // The same samples, each counted once at its size: small blocks are under-represented.
    const raw = bySite(proto, (s) => {
      const size = Number(/bytes:\[(\d+) bytes\]/.exec(s.labels)?.[1]);
      return Math.round(sampleValue(proto, s, 'inuse_objects') / weight(size, out.interval)) * size;
    });
    const failing = shareErrors(raw).filter(({ rel, sigma }) => Math.abs(rel) > 4 * sigma || Math.abs(rel) > 0.1);
    assert.ok(failing.length > 0, 'the gate accepted an estimator that ignores the sampling probability');
  });
});

interface UnbiasedOutput {
  interval: number;
  exact: number;
  variance: number;
  variance_of_variance: number;
  estimate: number;
  variance_estimate: number;
  live_samples: number;
  dropped: number;
}

describe('unbiased in-use estimate over 20 seeds (16 B to 8 MiB, default interval)', () => {
  const bin = fixture('unbiased');
  const dir = tempDir();
  const runs = Array.from({ length: 20 }, (_, seed) => {
    const path = join(dir, `u${seed}.heap`);
    const r = runPreloaded(bin, ['3000', path], { MIMALLOC_PROF: '1', MIMALLOC_PROF_SEED: String(seed + 1) });
    assert.equal(r.status, 0, r.stderr);
    return { out: JSON.parse(r.stdout) as UnbiasedOutput, heap: parseHeapText(readFileSync(path, 'utf8')) };
  });
  const exact = runs[0]!.out.exact;
  const sigma = Math.sqrt(runs[0]!.out.variance);

  test('the workload is the same on every run', () => {
    for (const { out } of runs) {
      assert.equal(out.exact, exact);
      assert.equal(out.interval, 524288);
      assert.equal(out.dropped, 0);
    }
  });

  test('every run lies within 4 sigma of the exact bytes', (t) => {
    const zs = runs.map(({ out }) => (out.estimate - exact) / sigma);
    t.diagnostic(`z over 20 seeds: min ${Math.min(...zs).toFixed(2)}, max ${Math.max(...zs).toFixed(2)}; sigma ${((100 * sigma) / exact).toFixed(2)} % of ${exact} bytes`);
    for (const { out } of runs) {
      const z = (out.estimate - exact) / sigma;
      assert.ok(Math.abs(z) <= 4, `estimate ${out.estimate}, exact ${exact}, z = ${z.toFixed(2)}`);
    }
  });

  // The mean of 20 independent runs has sigma / sqrt(20).
  const meanGate = (estimates: number[]) => {
    const mean = estimates.reduce((a, b) => a + b, 0) / estimates.length;
    const rel = mean / exact - 1;
    return { rel, ok: Math.abs(rel) <= 0.02 && Math.abs(mean - exact) <= (4 * sigma) / Math.sqrt(estimates.length) };
  };

  test('the mean over 20 seeds is within 2 % (and 4 sigma / sqrt 20)', (t) => {
    const { rel, ok } = meanGate(runs.map((r) => r.out.estimate));
    t.diagnostic(`mean of 20 estimates off by ${(rel * 100).toFixed(3)} % (4 sigma/sqrt 20 = ${((400 * sigma) / Math.sqrt(20) / exact).toFixed(3)} %)`);
    assert.ok(ok, `mean off by ${(rel * 100).toFixed(3)} %`);
  });

  // The profiler's variance estimate (sum over live samples of s^2 (1-p)/p^2, what the RSS
  // breakdown's standard error comes from) is unbiased for the model's variance: the mean of
  // 20 independent ones lies within 4 of its own standard deviations / sqrt 20.
  const varianceGate = (estimates: number[]) => {
    const mean = estimates.reduce((a, b) => a + b, 0) / estimates.length;
    const bound = (4 * Math.sqrt(runs[0]!.out.variance_of_variance)) / Math.sqrt(estimates.length);
    return { rel: mean / runs[0]!.out.variance - 1, ok: Math.abs(mean - runs[0]!.out.variance) <= bound, bound };
  };
  // the same from the rows of each dump (sampled counts): the control drops the (1 - p)
  const varianceFromRows = (r: (typeof runs)[number], withOneMinusP: boolean) =>
    r.heap.rows.reduce((a, row) => {
      if (row.inuseCount === 0) return a;
      const size = row.inuseBytes / row.inuseCount;
      const w = weight(size, r.out.interval);
      return a + row.inuseCount * size * size * w * (withOneMinusP ? w - 1 : w);
    }, 0);

  test('the variance estimate (stats) is unbiased: its mean over 20 seeds is within 4 of its sigmas / sqrt 20 of the model', (t) => {
    const { rel, ok, bound } = varianceGate(runs.map((r) => r.out.variance_estimate));
    t.diagnostic(`mean variance estimate off by ${(rel * 100).toFixed(2)} % (bound ${((100 * bound) / runs[0]!.out.variance).toFixed(2)} %)`);
    assert.ok(ok, `mean variance estimate off by ${(rel * 100).toFixed(2)} %`);
    for (const r of runs) {
      const rows = varianceFromRows(r, true);
      assert.ok(Math.abs(rows - r.out.variance_estimate) <= 1e-6 * r.out.variance_estimate, `rows ${rows} vs stats ${r.out.variance_estimate}`);
    }
  });

  test('positive control: the variance without its (1 - p) factor fails the same gate', (t) => {
    const { rel, ok } = varianceGate(runs.map((r) => varianceFromRows(r, false)));
    t.diagnostic(`control caught: the mean is off by ${(rel * 100).toFixed(2)} %`);
    assert.equal(ok, false);
  });

  test('the heap_v2 rows carry the same estimate (pprof unsamples them per row)', () => {
    for (const { out, heap } of runs) {
      const fromRows = heap.rows.reduce((a, r) => {
        const size = r.inuseBytes / r.inuseCount;
        return r.inuseCount === 0 ? a : a + r.inuseBytes * weight(size, out.interval);
      }, 0);
      assert.ok(Math.abs(fromRows - out.estimate) <= 1e-6 * exact, `${fromRows} vs ${out.estimate}`);
    }
  });

  test('positive control: a max(size, R) weight per sample (a common shortcut) fails the gate', () => {
    const biased = runs.map(({ heap, out }) =>
      heap.rows.reduce((a, r) => (r.inuseCount === 0 ? a : a + r.inuseCount * Math.max(out.interval, r.inuseBytes / r.inuseCount)), 0),
    );
    assert.equal(meanGate(biased).ok, false, 'the gate accepted a biased estimator');
  });
});

describe('C++ operator new from named functions', () => {
  for (const [variant, flags] of [
    ['-O2 without frame pointers', ['-O2', '-fomit-frame-pointer']],
    ['-O0 with frame pointers', ['-O0', '-fno-omit-frame-pointer']],
  ] as const) {
    test(`the calling functions appear in >= 95 % of samples (${variant})`, { skip: onMusl && MUSL_NO_CXX }, (t) => {
      const bin = fixture('newsite', { flags: [...flags], variant: flags[0] });
      const dir = tempDir();
      const path = join(dir, 'new.pb');
      const fraction = (env: Record<string, string>) => {
        const r = runPreloaded(bin, [path], env);
        assert.equal(r.status, 0, r.stderr);
        const p = pprofRaw(path, bin);
        const names = symbolizeWithNm(p, bin);
        const all = p.samples.reduce((a, s) => a + sampleValue(p, s, 'inuse_objects'), 0);
        const hit = (fn: string) =>
          p.samples.filter((_, i) => names[i]!.includes(fn)).reduce((a, s) => a + sampleValue(p, s, 'inuse_objects'), 0) / all;
        return { make: hit('make_widgets'), build: hit('build_city'), samples: p.samples.length };
      };
      const full = fraction({});
      t.diagnostic(`make_widgets in ${(full.make * 100).toFixed(1)} %, build_city in ${(full.build * 100).toFixed(1)} % of the samples (${full.samples} distinct stacks)`);
      assert.ok(full.make >= 0.95, `make_widgets in ${(full.make * 100).toFixed(1)} %`);
      assert.ok(full.build >= 0.95, `build_city in ${(full.build * 100).toFixed(1)} %`);
      // Positive control: with one frame kept, the caller's caller cannot appear.
      const cut = fraction({ MIMALLOC_PROF_BT_MAX: '1' });
      assert.ok(cut.build < 0.95, 'the stack gate passed with stacks cut to one frame');
    });
  }
});

describe('determinism', () => {
  const bin = fixture('unbiased');
  const dir = tempDir();
  // setarch is a glibc program: on musl the fixture norandom does what `setarch -R` does
  const noRandom = (cmd: string, args: string[]): [string, string[]] =>
    onMusl ? [fixture('norandom'), [cmd, ...args]] : ['setarch', [process.arch === 'x64' ? 'x86_64' : 'aarch64', '-R', cmd, ...args]];
  // Address-space randomisation off, so that equal samples print equal addresses.
  const rows = (seed: string, name: string) => {
    const path = join(dir, name);
    const p = runPreloaded(...noRandom(bin, ['400', path]), {
      MIMALLOC_PROF: '1',
      MIMALLOC_PROF_SEED: seed,
      MIMALLOC_PROF_SAMPLE_INTERVAL: '65536',
    });
    assert.equal(p.status, 0, p.stderr);
    return parseHeapText(readFileSync(path, 'utf8')).rows.map((r) => `${r.inuseCount}:${r.inuseBytes} @ ${r.stack.join(' ')}`).sort();
  };

  test('the same seed gives identical samples in two processes; another seed does not', () => {
    const a = rows('42', 'a.heap');
    const b = rows('42', 'b.heap');
    const c = rows('43', 'c.heap');
    assert.ok(a.length > 10, `only ${a.length} rows`);
    assert.deepEqual(a, b);
    assert.notDeepEqual(a, c);
  });
});
