/**
 * `compare`'s outputs: the terminal table, the Markdown decision record, the JSON (the
 * CompareResult itself), and the progress line.
 */
import { installHint } from './allocators.js';
import { type CompareResult, METRICS, type Metric, type ProgressEvent } from './compare.js';
import { MIN_VERDICT_BLOCKS, NOT_ENOUGH_BLOCKS, type Spread } from './stats.js';

/** Seconds: ms below 1 s, µs below 1 ms. */
export function formatSeconds(s: number): string {
  if (!Number.isFinite(s)) return '—';
  if (s >= 100) return `${s.toFixed(1)} s`;
  if (s >= 1) return `${s.toFixed(3)} s`;
  if (s >= 1e-3) return `${(s * 1e3).toFixed(s >= 0.1 ? 1 : 2)} ms`;
  return `${(s * 1e6).toFixed(0)} µs`;
}

export function formatBytes(b: number): string {
  if (!Number.isFinite(b)) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = b;
  let u = 0;
  while (Math.abs(v) >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return u === 0 ? `${v.toFixed(0)} B` : `${v.toFixed(v >= 100 ? 0 : 1)} ${units[u]}`;
}

export function formatCount(n: number): string {
  if (!Number.isFinite(n)) return '—';
  if (Math.abs(n) >= 1e9) return `${(n / 1e9).toFixed(2)} G`;
  if (Math.abs(n) >= 1e6) return `${(n / 1e6).toFixed(2)} M`;
  if (Math.abs(n) >= 1e4) return `${(n / 1e3).toFixed(1)} k`;
  return Number.isInteger(n) ? String(n) : n.toFixed(1);
}

export function formatValue(metric: Pick<Metric, 'unit'>, v: number): string {
  return metric.unit === 's' ? formatSeconds(v) : metric.unit === 'bytes' ? formatBytes(v) : formatCount(v);
}

function ratio(x: number): string {
  return `${x >= 10 ? x.toFixed(1) : x.toFixed(3)}×`;
}

function cellOf(metric: Metric, s: Spread | undefined): string {
  if (!s || s.n === 0) return '—';
  const rel = Number.isFinite(s.relIqr) ? ` ±${((s.relIqr * 100) / 2).toFixed(1)}%` : '';
  return `${formatValue(metric, s.median)}${rel}`;
}

function table(rows: string[][], alignRight: (col: number) => boolean): string {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length)));
  return rows
    .map((r) => r.map((c, i) => (alignRight(i) ? c.padStart(widths[i]!) : c.padEnd(widths[i]!))).join('  ').trimEnd())
    .join('\n');
}

/** A shell-quoted command line. */
export function shellLine(argv: readonly string[]): string {
  return argv.map((a) => (/^[A-Za-z0-9_@%+=:,./-]+$/.test(a) ? a : `'${a.replace(/'/g, `'\\''`)}'`)).join(' ');
}

/** The command line that repeats this comparison (same arms, blocks and seed). */
export function reproduceLine(r: CompareResult): string {
  const env = r.arms.flatMap((a) =>
    Object.entries(a.env)
      .filter(([k]) => !(a.kind === 'mimalloc-pprof-profiling' && k === 'MIMALLOC_PROF'))
      .map(([k, v]) => `--env ${shellLine([`${a.label}:${k}=${v}`])}`),
  );
  return [
    'mimalloc-pprof compare',
    `--allocators ${shellLine([r.allocators])}`,
    `--baseline ${r.baseline}`,
    `--blocks ${r.blocks}`,
    `--warmup ${r.warmup}`,
    `--seed ${r.seed}`,
    ...(r.resamples !== 10_000 ? [`--resamples ${r.resamples}`] : []),
    ...env,
    '--',
    shellLine(r.command),
  ].join(' ');
}

const SHOWN = METRICS.filter((m) => m.id !== 'userS' && m.id !== 'sysS');

/** The terminal report. */
export function renderText(r: CompareResult): string {
  const out: string[] = [];
  const labels = r.arms.map((a) => a.label);
  out.push('');
  out.push(`median ±half the IQR over ${r.blocks} blocks (${labels.length} arms, order shuffled per block, seed ${r.seed})`);
  // "best" only where the intervals are valid for a verdict (MIN_VERDICT_BLOCKS)
  const verdicts = hasVerdicts(r);
  const head = ['', ...labels.map((l) => (l === r.baseline ? `${l} (baseline)` : l)), verdicts ? 'best' : ''];
  const rows: string[][] = [head];
  for (const metric of SHOWN) {
    rows.push([metric.label, ...labels.map((l) => cellOf(metric, r.summary[l]?.[metric.id])), verdicts ? (r.winners[metric.id]?.text ?? '') : '']);
  }
  if (Object.values(r.counts).some((c) => c !== null)) {
    const count = (l: string, f: 'allocations' | 'bytes') => {
      const c = r.counts[l];
      if (!c) return '—';
      if (c.error && c.counted === 0) return 'n/a';
      return f === 'allocations' ? formatCount(c.allocations) : formatBytes(c.bytes);
    };
    rows.push(['allocations (exact, mimalloc)', ...labels.map((l) => count(l, 'allocations')), '']);
    rows.push(['allocated bytes (exact, mimalloc)', ...labels.map((l) => count(l, 'bytes')), '']);
  }
  rows.push(['failed runs', ...labels.map((l) => `${r.failures[l]?.failed ?? 0}/${r.failures[l]?.of ?? 0}`), '']);
  out.push(table(rows, (i) => i > 0 && i <= labels.length));
  if (!verdicts) out.push(`${NOT_ENOUGH_BLOCKS}: ${r.blocks} block${r.blocks === 1 ? '' : 's'}; the intervals below are shown, but claim nothing (docs/compare.md)`);

  const pct = Math.round(r.confidence * 100);
  out.push('');
  out.push(
    `effect against ${r.baseline}: exp(median per-block log ratio), ${pct} % bootstrap interval (${r.resamples} whole-block resamples)`,
  );
  for (const arm of labels) {
    if (arm === r.baseline) continue;
    out.push(`${arm}:`);
    const erows: string[][] = [];
    for (const metric of SHOWN) {
      const e = r.effects[arm]?.[metric.id];
      if (!e) {
        erows.push([`  ${metric.label}`, 'n/a', '', '(fewer than 2 comparable blocks, or zero values)']);
        continue;
      }
      erows.push([`  ${metric.label}`, ratio(e.ratio), `[${ratio(e.lower)}, ${ratio(e.upper)}]`, e.verdict]);
    }
    out.push(table(erows, (i) => i === 1));
  }
  const notes = notesOf(r);
  if (notes.length) {
    out.push('');
    out.push(...notes);
  }
  return `${out.join('\n')}\n`;
}

/** Skipped arms, failed runs, counting problems: one line each. */
function notesOf(r: CompareResult): string[] {
  const notes: string[] = [];
  for (const s of r.skipped) notes.push(`skipped ${s.label}: ${installHint(s)}`);
  for (const [arm, f] of Object.entries(r.failures)) {
    if (f.failed === 0) continue;
    notes.push(`${arm}: ${f.failed} of ${f.of} runs failed and were left out (${f.reasons.slice(0, 3).join('; ')}${f.reasons.length > 3 ? '; …' : ''})`);
    const tail = r.runs.find((x) => x.arm === arm && !x.ok && x.stderrTail)?.stderrTail;
    if (tail) notes.push(`  last stderr: ${tail.split('\n').slice(-3).join(' | ')}`);
  }
  for (const [arm, c] of Object.entries(r.counts)) {
    if (!c) continue;
    if (c.error) notes.push(`${arm}: exact counts: ${c.error}`);
    else if (c.counted < c.processes) notes.push(`${arm}: exact counts cover ${c.counted} of ${c.processes} processes (the others ended without exit())`);
    if (c.varies) notes.push(`${arm}: exact counts differed between counting runs (the first is shown)`);
  }
  if (r.blocks < MIN_VERDICT_BLOCKS) {
    notes.push(`note: ${NOT_ENOUGH_BLOCKS}: below ${MIN_VERDICT_BLOCKS} blocks a 95 % bootstrap interval of the median covers 63–90 % (by simulation, docs/compare.md), so no arm is ranked and no difference is claimed`);
  }
  const [before, after] = [r.machine.loadBefore[0] ?? 0, r.machine.loadAfter[0] ?? 0];
  if (Math.max(before, after) > r.machine.cores * 0.5) {
    notes.push(`note: load average ${before.toFixed(2)} → ${after.toFixed(2)} on ${r.machine.cores} cores: other work shared the machine (the paired design cancels what drifts slowly)`);
  }
  return notes;
}

/** The Markdown decision record. */
export function renderMarkdown(r: CompareResult): string {
  const labels = r.arms.map((a) => a.label);
  const pct = Math.round(r.confidence * 100);
  const cmd = shellLine(r.command);
  const md: string[] = [];
  md.push(`# Allocator decision: \`${cmd}\``);
  md.push('');
  md.push(`*Measured ${r.date.slice(0, 10)} by mimalloc-pprof ${r.version} \`compare\`.*`);
  md.push('');
  md.push('## Status');
  md.push('');
  md.push('Proposed: measured on the command below; not yet adopted.');
  md.push('');
  md.push('## Context');
  md.push('');
  md.push(
    `\`${cmd}\` ran ${r.blocks} times under each of ${labels.map((l) => (l === r.baseline ? `**${l}** (baseline)` : `**${l}**`)).join(', ')} ` +
      `on ${r.machine.cpu} (${r.machine.cores} cores, Linux ${r.machine.kernel}, load average ${r.machine.loadBefore[0]?.toFixed(2)} → ${r.machine.loadAfter[0]?.toFixed(2)}), ` +
      `in paired blocks: each block ran every allocator once, in a fresh random order (seed ${r.seed}), after ${r.warmup} warm-up run${r.warmup === 1 ? '' : 's'} of each. ` +
      `Each cell is the median over blocks; below it, the effect against ${r.baseline}: exp(median per-block log ratio) with its ${pct} % bootstrap interval ` +
      `(${r.resamples} whole-block resamples). A difference is claimed only when the interval excludes 1; ` +
      `the winner of a row is the arm with the lowest effect, with every arm not detectably different from it.`,
  );
  if (r.skipped.length) {
    md.push('');
    md.push(`Not measured: ${r.skipped.map((s) => `${s.label}: ${installHint(s)}`).join('; ')}.`);
  }
  md.push('');
  md.push('## Options and measurements');
  md.push('');
  md.push(`| | ${labels.map((l) => (l === r.baseline ? `${l} (baseline)` : l)).join(' | ')} | winner |`);
  md.push(`|---|${labels.map(() => '---:').join('|')}|---|`);
  const rowsFor: Metric[] = METRICS.filter((m) => ['cpuS', 'wallS', 'maxrssBytes', 'minflt', 'majflt', 'nvcsw', 'nivcsw'].includes(m.id));
  for (const metric of rowsFor) {
    const cells = labels.map((l) => {
      const s = r.summary[l]?.[metric.id];
      if (!s || s.n === 0) return '—';
      const v = formatValue(metric, s.median);
      const e = l === r.baseline ? null : r.effects[l]?.[metric.id];
      if (!e) return v;
      const signed = (x: number) => `${x >= 1 ? '+' : '−'}${(Math.abs(x - 1) * 100).toFixed(Math.abs(x - 1) < 0.0995 ? 1 : 0)} %`;
      const text = `${signed(e.ratio)} [${signed(e.lower)}, ${signed(e.upper)}]`;
      return `${v}<br>${e.significant ? `**${text}**` : text}`;
    });
    md.push(`| ${metric.label} | ${cells.join(' | ')} | ${hasVerdicts(r) ? (r.winners[metric.id]?.text ?? '') : NOT_ENOUGH_BLOCKS} |`);
  }
  if (Object.values(r.counts).some((c) => c !== null)) {
    const count = (l: string, f: 'allocations' | 'bytes') => {
      const c = r.counts[l];
      if (!c) return '—';
      if (c.error && c.counted === 0) return 'n/a';
      return f === 'allocations' ? c.allocations.toLocaleString('en-US') : formatBytes(c.bytes);
    };
    md.push(`| allocation count (exact) | ${labels.map((l) => count(l, 'allocations')).join(' | ')} | counted on mimalloc only |`);
    md.push(`| allocated bytes (exact) | ${labels.map((l) => count(l, 'bytes')).join(' | ')} | |`);
  }
  md.push(`| failed runs | ${labels.map((l) => `${r.failures[l]?.failed ?? 0} of ${r.failures[l]?.of ?? 0}`).join(' | ')} | |`);
  md.push('');
  md.push('## Decision');
  md.push('');
  md.push(decision(r));
  const notes = notesOf(r);
  if (notes.length) {
    md.push('');
    md.push('## Notes');
    md.push('');
    for (const n of notes) md.push(`- ${n.replace(/^note: /, '')}`);
  }
  md.push('');
  md.push('## Reproduce');
  md.push('');
  md.push('```sh');
  md.push(reproduceLine(r));
  md.push('```');
  md.push('');
  return md.join('\n');
}

/** Whether the experiment has blocks enough for its intervals to carry verdicts. */
function hasVerdicts(r: CompareResult): boolean {
  return r.blocks >= MIN_VERDICT_BLOCKS;
}

/** The suggested decision: CPU time decides; memory is the trade-off to state. */
function decision(r: CompareResult): string {
  const cpu = r.winners.cpuS;
  const mem = (arm: string) => {
    const e = r.effects[arm]?.maxrssBytes;
    return e && e.significant ? ` Trade-off: real memory ${e.verdict} against ${r.baseline}.` : '';
  };
  if (!hasVerdicts(r) || cpu?.text === NOT_ENOUGH_BLOCKS) return `No decision: ${NOT_ENOUGH_BLOCKS}; this experiment had ${r.blocks}.`;
  if (!cpu || cpu.best.length === 0) return 'No decision: no allocator has successful runs to compare.';
  if (cpu.best.length === 1) {
    const w = cpu.best[0]!;
    if (w === r.baseline) return `Keep **${w}**: no allocator used less CPU time than it on this command.`;
    const e = r.effects[w]?.cpuS;
    return `Suggested: **${w}**: CPU time ${e ? e.verdict : 'lowest'} against ${r.baseline}.${mem(w)}`;
  }
  if (cpu.best.length === r.arms.length) return `Keep **${r.baseline}**: no allocator's CPU time differs detectably from it on this command.`;
  if (cpu.best.includes(r.baseline)) {
    const others = cpu.best.filter((a) => a !== r.baseline);
    return `Keep **${r.baseline}**: ${others.length ? `${others.join(', ')} ${others.length === 1 ? 'is' : 'are'} not detectably different in CPU time, and the rest are slower` : 'no allocator is faster'} on this command.`;
  }
  return `Suggested: any of ${cpu.best.map((b) => `**${b}**`).join(', ')} (CPU time not detectably different between them, all below ${r.baseline}); decide on memory: ${cpu.best
    .map((b) => `${b} ${r.effects[b]?.maxrssBytes?.verdict ?? 'n/a'}`)
    .join('; ')}.`;
}

/** One progress line (a TTY gets it rewritten in place). */
export function progressText(e: ProgressEvent): string {
  const mark = e.result === null ? '' : e.result.ok ? ` ${formatSeconds(e.result.m!.wallS)}` : ` FAILED (${e.result.failure})`;
  if (e.phase === 'count') return `counting allocations on ${e.arm} (untimed)`;
  if (e.phase === 'warmup') return `warm-up ${e.block}/${e.blocks}: ${e.arm}${mark}`;
  return `block ${e.block}/${e.blocks} [${e.order.join(' ')}]: ${e.arm}${mark}`;
}
