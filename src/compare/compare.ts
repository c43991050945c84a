/**
 * `compare`'s experiment: paired, balanced blocks. Every block runs the command once under
 * every arm, in a fresh random order (a seeded shuffle per block), so that run order and
 * drifting machine load fall on all arms alike and cancel in the per-block ratios. Warm-up
 * runs (each arm, shuffled) come first and are not counted; the counting run (exact
 * allocation counters, mimalloc arms only) is untimed.
 *
 * Per metric and arm: median and spread over blocks; against the baseline: the effect
 * exp(median per-block log ratio) with its 95 % whole-block bootstrap interval (stats.ts),
 * and a verdict only when the interval excludes 1. A failed run is reported and enters no
 * statistic: its block drops out of that arm's comparisons only.
 */
import { cpus, loadavg, release } from 'node:os';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

import { packageRoot } from '../preload/library.js';
import type { Arm, Skipped } from './allocators.js';
import { countRun, type Counts, type Measurement, type RunResult, runOnce } from './runner.js';
import { effect, type Effect, MIN_VERDICT_BLOCKS, type MetricKind, NOT_ENOUGH_BLOCKS, Rng, shuffle, spread, type Spread, streamOf } from './stats.js';

export interface Metric {
  id: keyof Measurement;
  label: string;
  kind: MetricKind;
  unit: 's' | 'bytes' | 'count';
}

/** The metrics, in the order of the tables. */
export const METRICS: readonly Metric[] = [
  { id: 'cpuS', label: 'CPU time (user+sys)', kind: 'time', unit: 's' },
  { id: 'wallS', label: 'wall time', kind: 'time', unit: 's' },
  { id: 'maxrssBytes', label: 'real memory (peak RSS)', kind: 'memory', unit: 'bytes' },
  { id: 'minflt', label: 'minor page faults', kind: 'count', unit: 'count' },
  { id: 'majflt', label: 'major page faults', kind: 'count', unit: 'count' },
  { id: 'nvcsw', label: 'voluntary context switches', kind: 'count', unit: 'count' },
  { id: 'nivcsw', label: 'involuntary context switches', kind: 'count', unit: 'count' },
  { id: 'userS', label: 'user CPU', kind: 'time', unit: 's' },
  { id: 'sysS', label: 'system CPU', kind: 'time', unit: 's' },
];

export interface CompareOptions {
  command: string[];
  /** --allocators as given (for the reproducing command line) */
  allocators: string;
  arms: Arm[];
  skipped: Skipped[];
  baseline: string;
  blocks: number;
  warmup: number;
  seed: number;
  resamples: number;
  confidence: number;
  counts: 'once' | 'every' | 'off';
  /** seconds per run; 0: none */
  timeout: number;
  env: Record<string, string>;
  cwd?: string;
  /** called after every run (progress) */
  onRun?: (e: ProgressEvent) => void;
}

export interface ProgressEvent {
  phase: 'warmup' | 'block' | 'count';
  block: number;
  blocks: number;
  arm: string;
  position: number;
  result: RunResult | null;
  order: string[];
}

export interface RunRecord {
  /** 1..blocks; 0 for a warm-up run */
  block: number;
  /** 0-based place in the block's order */
  position: number;
  arm: string;
  ok: boolean;
  m: Measurement | null;
  exitCode: number | null;
  signal: number | null;
  failure?: string;
  stderrTail?: string;
}

export interface Winner {
  /** the arms not detectably worse than the best median (one: a clear winner) */
  best: string[];
  /** "mimalloc", "glibc ≈ mimalloc", or "no difference detected" */
  text: string;
}

export interface CompareResult {
  tool: 'mimalloc-pprof compare';
  version: string;
  date: string;
  command: string[];
  allocators: string;
  cwd: string;
  seed: number;
  blocks: number;
  warmup: number;
  resamples: number;
  confidence: number;
  baseline: string;
  machine: { cpu: string; cores: number; kernel: string; arch: string; node: string; loadBefore: number[]; loadAfter: number[] };
  arms: { label: string; kind: string; library: string | null; env: Record<string, string>; wrap?: string[] }[];
  skipped: Skipped[];
  orders: string[][];
  runs: RunRecord[];
  counts: Record<string, Counts | null>;
  summary: Record<string, Record<string, Spread>>;
  failures: Record<string, { failed: number; of: number; reasons: string[] }>;
  effects: Record<string, Record<string, Effect | null>>;
  winners: Record<string, Winner>;
}

function version(): string {
  try {
    return (JSON.parse(readFileSync(join(packageRoot, 'package.json'), 'utf8')) as { version: string }).version;
  } catch {
    return 'unknown';
  }
}

function record(block: number, position: number, arm: string, r: RunResult): RunRecord {
  return {
    block,
    position,
    arm,
    ok: r.ok,
    m: r.m,
    exitCode: r.exitCode,
    signal: r.signal,
    ...(r.failure ? { failure: r.failure } : {}),
    ...(r.stderrTail ? { stderrTail: r.stderrTail } : {}),
  };
}

/** Runs the experiment and computes every statistic. */
export async function runCompare(o: CompareOptions): Promise<CompareResult> {
  const labels = o.arms.map((a) => a.label);
  const orderRng = new Rng(o.seed, streamOf('order'));
  const loadBefore = loadavg();
  const runs: RunRecord[] = [];
  const orders: string[][] = [];
  const counts: Record<string, Counts | null> = {};
  const runSpec = (arm: Arm, block: number) => ({
    command: o.command,
    arm,
    env: { ...o.env, MIMALLOC_PPROF_COMPARE_ARM: arm.label, MIMALLOC_PPROF_COMPARE_BLOCK: String(block) },
    timeout: o.timeout,
    ...(o.cwd ? { cwd: o.cwd } : {}),
  });

  for (let w = 0; w < o.warmup; w++) {
    const order = shuffle(o.arms, orderRng);
    for (const [position, arm] of order.entries()) {
      const r = await runOnce(runSpec(arm, 0));
      runs.push(record(0, position, arm.label, r));
      o.onRun?.({ phase: 'warmup', block: w + 1, blocks: o.warmup, arm: arm.label, position, result: r, order: order.map((a) => a.label) });
    }
  }

  const counting = o.arms.filter((a) => a.mimalloc);
  const countAll = async (block: number) => {
    for (const arm of counting) {
      const c = await countRun(runSpec(arm, block));
      const prev = counts[arm.label];
      // keep the first successful figures; note when a later counting run differs
      if (!prev || (prev.error && !c.error)) counts[arm.label] = { ...c, runs: (prev?.runs ?? 0) + 1 };
      else {
        prev.runs = (prev.runs ?? 1) + 1;
        if (!c.error && (c.allocations !== prev.allocations || c.bytes !== prev.bytes)) prev.varies = true;
      }
      o.onRun?.({ phase: 'count', block, blocks: o.blocks, arm: arm.label, position: 0, result: null, order: [] });
    }
  };
  if (o.counts !== 'off') await countAll(0);

  for (let b = 1; b <= o.blocks; b++) {
    const order = shuffle(o.arms, orderRng);
    orders.push(order.map((a) => a.label));
    for (const [position, arm] of order.entries()) {
      const r = await runOnce(runSpec(arm, b));
      runs.push(record(b, position, arm.label, r));
      o.onRun?.({ phase: 'block', block: b, blocks: o.blocks, arm: arm.label, position, result: r, order: order.map((a) => a.label) });
    }
    if (o.counts === 'every') await countAll(b);
  }
  for (const a of o.arms) if (!(a.label in counts)) counts[a.label] = null;

  const stats = analyse(runs, labels, o.baseline, o.blocks, o.seed, { resamples: o.resamples, confidence: o.confidence });
  const cpu = cpus();
  return {
    tool: 'mimalloc-pprof compare',
    version: version(),
    date: new Date().toISOString(),
    command: o.command,
    allocators: o.allocators,
    cwd: o.cwd ?? process.cwd(),
    seed: o.seed,
    blocks: o.blocks,
    warmup: o.warmup,
    resamples: o.resamples,
    confidence: o.confidence,
    baseline: o.baseline,
    machine: {
      cpu: cpu[0]?.model.trim() ?? 'unknown',
      cores: cpu.length,
      kernel: release(),
      arch: process.arch,
      node: process.version,
      loadBefore,
      loadAfter: loadavg(),
    },
    arms: o.arms.map((a) => ({ label: a.label, kind: a.kind, library: a.library ?? null, env: a.env, ...(a.wrap ? { wrap: a.wrap } : {}) })),
    skipped: o.skipped,
    orders,
    runs,
    counts,
    ...stats,
  };
}

/**
 * The statistics of a set of runs (pure: tests feed it synthetic runs). Values per arm are
 * indexed by block; a failed run is null.
 */
export function analyse(
  runs: readonly RunRecord[],
  labels: readonly string[],
  baseline: string,
  blocks: number,
  seed: number,
  opts: { resamples: number; confidence: number },
): Pick<CompareResult, 'summary' | 'failures' | 'effects' | 'winners'> {
  const perBlock = (arm: string, metric: keyof Measurement): (number | null)[] => {
    const v: (number | null)[] = Array.from({ length: blocks }, () => null);
    for (const r of runs) if (r.arm === arm && r.block >= 1 && r.ok && r.m) v[r.block - 1] = r.m[metric];
    return v;
  };
  const summary: Record<string, Record<string, Spread>> = {};
  const failures: Record<string, { failed: number; of: number; reasons: string[] }> = {};
  for (const arm of labels) {
    summary[arm] = {};
    for (const metric of METRICS) {
      summary[arm]![metric.id] = spread(perBlock(arm, metric.id).filter((x): x is number => x !== null));
    }
    const mine = runs.filter((r) => r.arm === arm && r.block >= 1);
    const failed = mine.filter((r) => !r.ok);
    failures[arm] = { failed: failed.length, of: mine.length, reasons: failed.map((r) => `block ${r.block}: ${r.failure ?? 'failed'}`) };
  }
  const bootstrap = { resamples: opts.resamples, confidence: opts.confidence };
  const pair = (arm: string, base: string, metric: Metric) =>
    effect(perBlock(arm, metric.id), perBlock(base, metric.id), metric.kind, new Rng(seed, streamOf(`${arm}/${base}/${metric.id}`)), bootstrap);

  const effects: Record<string, Record<string, Effect | null>> = {};
  for (const arm of labels) {
    if (arm === baseline) continue;
    effects[arm] = {};
    for (const metric of METRICS) effects[arm]![metric.id] = pair(arm, baseline, metric);
  }

  // The winner of a row: the best arm by its paired effect against the baseline (the baseline
  // counts 1; an arm without an effect, by the ratio of medians), together with every arm whose
  // interval against it contains 1. Ranking by the paired effect, not by the arms' own medians,
  // keeps the winner consistent with the within-block comparisons.
  const winners: Record<string, Winner> = {};
  for (const metric of METRICS) {
    const baseMedian = summary[baseline]?.[metric.id]?.median ?? NaN;
    const key = (a: string): number => {
      if (a === baseline) return 1;
      const e = effects[a]?.[metric.id];
      return e ? e.ratio : summary[a]![metric.id]!.median / baseMedian;
    };
    const ranked = labels
      .filter((a) => Number.isFinite(summary[a]![metric.id]!.median))
      .sort((x, y) => {
        const kx = key(x);
        const ky = key(y);
        if (Number.isFinite(kx) && Number.isFinite(ky) && kx !== ky) return kx - ky;
        return summary[x]![metric.id]!.median - summary[y]![metric.id]!.median;
      });
    if (ranked.length < 2) {
      winners[metric.id] = { best: ranked, text: ranked.length === 1 ? ranked[0]! : 'n/a' };
      continue;
    }
    // no winner from an interval that is not valid for the blocks it stands on
    const comparable = labels.filter((a) => a !== baseline).map((a) => effects[a]?.[metric.id]).filter((e): e is Effect => !!e);
    if (blocks < MIN_VERDICT_BLOCKS || comparable.some((e) => !e.enough)) {
      winners[metric.id] = { best: [], text: NOT_ENOUGH_BLOCKS };
      continue;
    }
    const top = ranked[0]!;
    const best = [top];
    let undecided = false;
    for (const other of ranked.slice(1)) {
      const e = other === baseline ? effects[top]?.[metric.id] : top === baseline ? effects[other]?.[metric.id] : pair(other, top, metric);
      const same = summary[other]![metric.id]!.median === summary[top]![metric.id]!.median;
      if (e === null || e === undefined) {
        if (same) best.push(other); // e.g. no major faults anywhere
        else undecided = true;
      }
      else if (!e.significant) best.push(other);
    }
    const text = undecided && best.length === 1 ? `${top} (not all pairs comparable)` : best.length === ranked.length ? 'no difference detected' : best.join(' ≈ ');
    winners[metric.id] = { best, text };
  }
  return { summary, failures, effects, winners };
}
