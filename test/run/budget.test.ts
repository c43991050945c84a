/**
 * Memory budgets for a whole program (issue 34 (1)): `run --max-in-use` / `--max-peak` fail the
 * run (status 4) when the estimate's one-sided 95 % lower bound is over the budget
 * (src/run/budget.ts), name what holds the memory, and still write the profile and the report.
 *
 * The rule, statistically: a C program keeps a known number of bytes (4000 blocks of 4 KiB)
 * and runs under 20 seeds at a 64 KiB interval (standard error about 6 % of the truth). With the
 * budget 10 % above the truth the lower bound passes it only if the estimate is 1.6 standard
 * errors + 10 % over, about 3.3 standard errors: a false alarm has probability ~5e-4 a run, so
 * at most 1 of 20 (the 5 %) holds with room. Control: the point estimate alone against
 * a budget at the truth alarms in about half the runs (fails "at most 1 of 20" unless fewer than
 * 2 of 20 fair coins come up, p ~ 2e-5).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { inUseEstimate, overBudget } from '../../src/run/budget.js';
import { root, run, tempDir } from '../helpers.js';
import { decode } from './decode.js';

const cli = join(root, 'dist', 'src', 'cli', 'bin.js');
const fixtures = join(root, 'test', 'run', 'fixtures');

function mpp(args: string[], env: Record<string, string> = {}) {
  return spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8', env: { ...process.env, ...env }, timeout: 120_000 });
}

test('a leaking handler over --max-in-use fails the run with status 4, names the handler, writes profile and report; its control passes', () => {
  const dir = tempDir('mpp-budget-');
  const out = join(dir, 'leak.pb.gz');
  const leak = mpp(['run', '--max-in-use', '16m', '--out', out, '--', 'node', join(fixtures, 'budget-leak.cjs')], { LEAK: '1' });
  assert.equal(leak.status, 4, leak.stderr);
  const line = leak.stderr.split('\n').find((l) => l.includes('MEMORY BUDGET EXCEEDED')) ?? '';
  assert.match(line, /in use at exit \(95 % lower bound [\d.]+MiB\), over --max-in-use 16MiB; most in use under: handlePayload \S+budget-leak\.cjs:\d+/);
  assert.ok(existsSync(out) && existsSync(join(dir, 'leak.html')), 'the profile and the report are written');
  const control = mpp(['run', '--max-in-use', '16m', '--out', join(dir, 'control.pb.gz'), '--', 'node', join(fixtures, 'budget-leak.cjs')]);
  assert.equal(control.status, 0, control.stderr);
  assert.doesNotMatch(control.stderr, /MEMORY BUDGET EXCEEDED/);
});

test("the program's own failure keeps its status over the budget's", () => {
  const dir = tempDir('mpp-budget-');
  const r = mpp(['run', '--max-in-use', '1k', '--out', join(dir, 'p.pb.gz'), '--', 'node', '-e', 'globalThis.k = Buffer.alloc(8 << 20, 1); process.exitCode = 7']);
  assert.equal(r.status, 7, r.stderr);
  assert.match(r.stderr, /MEMORY BUDGET EXCEEDED/);
});

test('--max-peak judges the high-water mark: a program that frees before it ends fails it, and passes --max-in-use', () => {
  const dir = tempDir('mpp-budget-');
  const src = join(fixtures, 'peak_then_free.c');
  const bin = join(dir, 'peak');
  assert.equal(run('cc', ['-O1', '-g', src, '-o', bin]).status, 0);
  const peak = mpp(['run', '--max-peak', '8m', '--out', join(dir, 'a.pb.gz'), '--', bin]);
  assert.equal(peak.status, 4, peak.stderr);
  assert.match(peak.stderr, /in use at the peak \(95 % lower bound/);
  const exit = mpp(['run', '--max-in-use', '8m', '--out', join(dir, 'b.pb.gz'), '--', bin]);
  assert.equal(exit.status, 0, exit.stderr);
});

test('the lower-bound rule: at most 1 false alarm in 20 seeds at a budget 10 % over the truth; the point estimate alone alarms (control)', (t) => {
  const dir = tempDir('mpp-budget-');
  const bin = join(dir, 'retain');
  assert.equal(run('cc', ['-O1', '-g', join(fixtures, 'retain_blocks.c'), '-o', bin]).status, 0);
  let alarms = 0;
  let pointAlarms = 0;
  const rel: number[] = [];
  for (let seed = 1; seed <= 20; seed++) {
    const out = join(dir, `r${seed}.pb.gz`);
    const truth = 4000 * 4096;
    const budget = Math.round(1.1 * truth);
    const r = mpp(['run', '--interval', '64k', '--seed', String(seed), '--max-in-use', String(budget), '--top', '0', '--out', out, '--', bin, '4000', '4096']);
    assert.ok(r.status === 0 || r.status === 4, r.stderr);
    assert.equal(Number(r.stdout.trim()), truth);
    if (r.status === 4) alarms++;
    const { profile } = decode(out);
    const e = inUseEstimate(profile);
    rel.push(e.stdError / e.bytes);
    assert.equal(overBudget(e, budget), r.status === 4, 'run applies the rule it exports');
    if (e.bytes > truth) pointAlarms++;
  }
  t.diagnostic(`false alarms at 1.1x the truth: ${alarms} of 20; point estimate over the truth: ${pointAlarms} of 20; standard error ${(100 * Math.min(...rel)).toFixed(1)}-${(100 * Math.max(...rel)).toFixed(1)} % of the estimate`);
  assert.ok(alarms <= 1, `${alarms} false alarms in 20`);
  assert.ok(pointAlarms > 1, `control: the point estimate alone alarmed ${pointAlarms} times at the truth`);
});
