/**
 * `mimalloc-pprof compare [options] -- CMD ARGS…`: which allocator is better for CMD, with
 * statistics. See src/compare/ (the experiment and its statistics) and docs/compare.md.
 */
import { randomInt } from 'node:crypto';

import { UsageError } from '../errors.js';
import { applyArmEnv, DEFAULT_ALLOCATORS, installHint, KINDS, parseAllocators, resolveAllocators } from '../compare/allocators.js';
import { type CompareResult, runCompare } from '../compare/compare.js';
import { progressText, renderMarkdown, renderText, shellLine } from '../compare/report.js';
import { baseEnvironment, identify, preloadObstacle, which } from '../compare/runner.js';
import type { Command, Io } from './args.js';
import { splitCommandLine, writeFileAtomic } from './args.js';

export const COMPARE_HELP = `Usage: mimalloc-pprof compare [options] -- CMD [ARGS…]

Runs CMD under several allocators in paired, balanced blocks (each block runs CMD once under
every allocator, in a fresh random order) and reports, per allocator, the median and spread
of wall time, CPU time, peak RSS, page faults and context switches (from wait4), the exact
allocation count on mimalloc, and against the baseline the effect exp(median per-block log
ratio) with a 95 % bootstrap interval; a verdict ("faster by 12 % [8 %, 15 %]") only when the
interval excludes 1, else "no difference detected".

Options:
  --allocators LIST   comma-separated arms (default glibc,mimalloc,jemalloc,tcmalloc): an
                      allocator (${KINDS.join(', ')}),
                      NAME=ALLOCATOR (a second arm of one allocator), or NAME=/path/lib.so;
                      one that is not installed is skipped with its package
  --baseline NAME     the arm the others are compared with (default glibc, else the first)
  --blocks N          blocks (default 15; at least 2, and at least 5 for a verdict)
  --warmup N          unmeasured runs of each arm before the blocks (default 1)
  --seed N            the seed of the run order and the bootstrap (default random; printed)
  --resamples N       bootstrap resamples (default 10000)
  --counts MODE       exact allocation counts on mimalloc arms, from untimed runs with
                      MIMALLOC_MEMORY_EVENTS=1: once (default), every (once per block), off
  --env ARM:NAME=VAL  an environment variable for one arm's runs (repeatable), e.g.
                      --env jemalloc:MALLOC_CONF=background_thread:true
  --timeout SECONDS   kill a run after this long (it counts as failed; default none)
  --json FILE         write everything (every run, every statistic) as JSON; - for stdout
  --markdown FILE     write a decision record (Markdown table, winner per row); - for stdout
  --quiet             no progress on stderr
  -h, --help          this help

CMD's stdin and stdout are /dev/null; its stderr is kept to explain failed runs. Each run
gets MIMALLOC_PPROF_COMPARE_ARM and MIMALLOC_PPROF_COMPARE_BLOCK (0 for warm-up runs).
Exit status: 0, or 3 when some runs failed (they are reported and left out of the
statistics), 2 for bad usage.
`;

interface CompareArgs {
  allocators: string;
  baseline?: string;
  blocks: number;
  warmup: number;
  seed?: number;
  resamples: number;
  counts: 'once' | 'every' | 'off';
  env: string[];
  timeout: number;
  json?: string;
  markdown?: string;
  quiet: boolean;
  command: string[];
}

const VALUE_OPTIONS = new Set(['--allocators', '--baseline', '--blocks', '--warmup', '--seed', '--resamples', '--counts', '--env', '--timeout', '--json', '--markdown']);

function integer(name: string, value: string, min: number, max: number): number {
  if (!/^\d+$/.test(value) || Number(value) < min || Number(value) > max) {
    throw new UsageError(`compare: ${name} must be an integer from ${min} to ${max} (got ${value})`);
  }
  return Number(value);
}

export function parseCompareArgs(argv: string[]): CompareArgs | 'help' {
  const o: CompareArgs = { allocators: DEFAULT_ALLOCATORS.join(','), blocks: 15, warmup: 1, resamples: 10_000, counts: 'once', env: [], timeout: 0, quiet: false, command: [] };
  const split = splitCommandLine('compare', argv, new Set(['--quiet']), VALUE_OPTIONS);
  if (split === 'help') return 'help';
  for (const [name, value] of split.options) {
    if (value === true) {
      o.quiet = true; // --quiet
      continue;
    }
    switch (name) {
      case '--allocators':
        o.allocators = value;
        break;
      case '--baseline':
        o.baseline = value;
        break;
      case '--blocks':
        o.blocks = integer(name, value, 2, 100_000);
        break;
      case '--warmup':
        o.warmup = integer(name, value, 0, 1000);
        break;
      case '--seed':
        o.seed = integer(name, value, 0, Number.MAX_SAFE_INTEGER);
        break;
      case '--resamples':
        o.resamples = integer(name, value, 100, 10_000_000);
        break;
      case '--counts':
        if (value !== 'once' && value !== 'every' && value !== 'off') throw new UsageError(`compare: --counts must be once, every or off (got ${value})`);
        o.counts = value;
        break;
      case '--env':
        o.env.push(value);
        break;
      case '--timeout':
        if (!/^\d+(\.\d+)?$/.test(value) || Number(value) > 1e6) throw new UsageError(`compare: --timeout must be a number of seconds (got ${value})`);
        o.timeout = Number(value);
        break;
      case '--json':
        o.json = value;
        break;
      case '--markdown':
        o.markdown = value;
        break;
    }
  }
  o.command = split.rest;
  if (o.command.length === 0) throw new UsageError('compare: no command given (mimalloc-pprof compare [options] -- CMD ARGS…)');
  if (o.json === '-' && o.markdown === '-') throw new UsageError('compare: --json and --markdown cannot both go to stdout');
  return o;
}

export async function compareCommand(argv: string[], io: Io): Promise<number> {
  const parsed = parseCompareArgs(argv);
  if (parsed === 'help') {
    io.out.write(COMPARE_HELP);
    return 0;
  }
  const o = parsed;
  const env = baseEnvironment();
  const requested = parseAllocators(o.allocators);
  const { arms, skipped } = resolveAllocators(requested);
  applyArmEnv(arms, o.env, skipped);

  const baseline = o.baseline ?? (requested.some((a) => a.label === 'glibc') ? 'glibc' : requested[0]!.label);
  if (!requested.some((a) => a.label === baseline)) {
    throw new UsageError(`compare: --baseline ${baseline} is not one of the arms (${requested.map((a) => a.label).join(', ')})`);
  }
  const base = skipped.find((s) => s.label === baseline);
  if (base) throw new UsageError(`compare: the baseline ${baseline} is ${installHint(base)}`);

  const [cmd] = o.command as [string, ...string[]];
  const file = which(cmd, env);
  if (file === undefined) throw new UsageError(`compare: ${cmd}: command not found`);
  const obstacle = preloadObstacle(file);
  if (obstacle && arms.some((a) => a.library)) throw new UsageError(`compare: ${obstacle}`);

  // Each preloaded arm must really run on its allocator (ld.so ignores a preload it cannot load).
  for (const arm of [...arms]) {
    if (!arm.library) continue;
    const id = identify(arm.library, { ...env, ...arm.env });
    const expected = arm.kind === 'jemalloc' || arm.kind === 'tcmalloc' ? arm.kind : arm.mimalloc ? 'mimalloc' : undefined;
    if (id.error || (expected && id.allocator !== expected)) {
      arms.splice(arms.indexOf(arm), 1);
      skipped.push({ label: arm.label, kind: arm.kind, reason: `${arm.library} did not take effect under LD_PRELOAD (${id.error ?? `malloc is ${id.allocator}'s`})` });
      if (arm.label === baseline) throw new UsageError(`compare: the baseline ${baseline}: ${skipped[skipped.length - 1]!.reason}`);
    }
  }
  if (arms.length < 2) {
    throw new UsageError(
      `compare: nothing to compare: only ${arms.map((a) => a.label).join(', ') || 'no arm'} can run${skipped.length ? ` (skipped: ${skipped.map((s) => `${s.label}: ${installHint(s)}`).join('; ')})` : ''}`,
    );
  }

  const seed = o.seed ?? randomInt(0, 2 ** 32);
  const err = io.err as { write(s: string): unknown; isTTY?: boolean };
  const tty = err.isTTY === true;
  const say = (s: string) => {
    if (!o.quiet) err.write(s);
  };
  say(`mimalloc-pprof compare: ${shellLine(o.command)}\n`);
  say(`${o.blocks} blocks × ${arms.length} arms (${arms.map((a) => a.label).join(', ')}), ${o.warmup} warm-up run${o.warmup === 1 ? '' : 's'} each, order shuffled per block, seed ${seed}; baseline ${baseline}\n`);
  for (const s of skipped) say(`skipped ${s.label}: ${installHint(s)}\n`);
  const result: CompareResult = await runCompare({
    command: o.command,
    allocators: o.allocators,
    arms,
    skipped,
    baseline,
    blocks: o.blocks,
    warmup: o.warmup,
    seed,
    resamples: o.resamples,
    confidence: 0.95,
    counts: o.counts,
    timeout: o.timeout,
    env,
    onRun: (e) => {
      if (o.quiet) return;
      const line = progressText(e);
      if (tty) err.write(`\r\x1b[K${line}`);
      // a file or a pipe: one line per finished block, warm-up run, counting run or failure
      else if (e.phase !== 'block' || e.position === e.order.length - 1 || (e.result && !e.result.ok)) err.write(`${line}\n`);
    },
  });
  if (tty && !o.quiet) err.write('\r\x1b[K');

  if (o.json === '-') io.out.write(`${JSON.stringify(result, null, 2)}\n`);
  else if (o.markdown === '-') io.out.write(renderMarkdown(result));
  else io.out.write(renderText(result));
  if (o.json && o.json !== '-') writeFileAtomic(o.json, `${JSON.stringify(result, null, 2)}\n`);
  if (o.markdown && o.markdown !== '-') writeFileAtomic(o.markdown, renderMarkdown(result));
  return Object.values(result.failures).some((f) => f.failed > 0) ? 3 : 0;
}

export const compareCommandEntry: Command = {
  summary: 'which allocator is better for a command: paired blocks, bootstrap intervals\n(glibc, mimalloc, jemalloc, tcmalloc; see compare --help)',
  run: (argv, io) => compareCommand(argv, io),
};
