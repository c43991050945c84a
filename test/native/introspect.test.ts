/** glibc's malloc introspection (mallinfo2, mallinfo, malloc_trim, malloc_stats, malloc_info,
 * mallopt) answered from mimalloc under the preload (native/src/introspect.c).
 *
 * One fixture keeps 100 MiB live in 1 MiB blocks, prints `key=value` lines, writes
 * malloc_stats to stderr and malloc_info to a file. It runs on plain glibc (the positive
 * control: glibc's own output is the reference for the text shapes, and its numbers show that
 * the checks below tell glibc's arena from mimalloc's) and under the preload three ways:
 * profiler stopped, exact counters on, profiler sampling. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';

import { buildDir, fixture, fixturesDir, run, runPreloaded, runTarget, tempDir, type Run } from '../helpers.js';
import { onMusl } from '../mimalloc.js';

const MiB = 1 << 20;
const LIVE = 100 * MiB; // the fixture's 100 blocks of 1 MiB
const SAMPLE_INTERVAL = 65536;

type Mode = 'glibc' | 'preload' | 'events' | 'sampled';
type Preloaded = Exclude<Mode, 'glibc'>;
const PRELOADED: Preloaded[] = ['preload', 'events', 'sampled'];

const MODE_ENV: Record<Preloaded, Record<string, string>> = {
  preload: {},
  events: { MIMALLOC_MEMORY_EVENTS: '1' },
  sampled: { MIMALLOC_PROF: '1', MIMALLOC_PROF_SAMPLE_INTERVAL: String(SAMPLE_INTERVAL) },
};

/** What each run is, as the fixture sees it: the control has no library at all. */
const MODE_STATE: Record<Mode, { preloaded: string; profiler: string; events: string }> = {
  glibc: { preloaded: 'no', profiler: 'absent', events: 'absent' },
  preload: { preloaded: 'yes', profiler: 'stopped', events: 'off' },
  events: { preloaded: 'yes', profiler: 'stopped', events: 'on' },
  sampled: { preloaded: 'yes', profiler: 'running', events: 'off' },
};

interface Result {
  kv: Map<string, string>;
  stderr: string; // malloc_stats, and nothing else
  xml: string; // malloc_info(0, f)
}

function num(r: Result, key: string): number {
  const v = r.kv.get(key);
  assert.ok(v !== undefined, `no ${key}= in the fixture's output`);
  const n = Number(v);
  assert.ok(Number.isSafeInteger(n), `${key}=${v} is not an integer`);
  return n;
}

// One binary for every run. libc named first provides the malloc family, so the binary does
// not depend on the library (fixture() links it as-needed): the control really is plain glibc.
function bin(): string {
  return fixture('introspect', { variant: '-glibc', flags: ['-Wl,--no-as-needed', '-lc'] });
}

/** The control's binary. In the musl pass the fixture is a musl program, whose C library has
 * none of these functions: the control (glibc's own answers, the reference for the text shapes
 * and mallopt's results) is then the same source built by this machine's glibc compiler, without
 * the library, and it is never run preloaded. */
function controlBin(): string {
  if (!onMusl) return bin();
  const src = join(fixturesDir, 'introspect.c');
  const out = join(buildDir, 'introspect-host-glibc');
  mkdirSync(buildDir, { recursive: true });
  if (existsSync(out) && statSync(out).mtimeMs >= statSync(src).mtimeMs) return out;
  const r = spawnSync('cc', ['-std=gnu11', '-g', '-O1', src, '-o', out, '-ldl'], { encoding: 'utf8' });
  assert.equal(r.status, 0, `building the glibc control failed:\n${r.stderr}`);
  return out;
}

const results = new Map<Mode, Result>();
function resultOf(mode: Mode): Result {
  let res = results.get(mode);
  if (res !== undefined) return res;
  const xmlPath = join(tempDir('mpp-introspect-'), 'malloc_info.xml');
  const r: Run =
    mode === 'glibc'
      ? (onMusl ? run : runTarget)(controlBin(), [xmlPath], { LD_PRELOAD: '' }, 20_000) // musl's control is this machine's
      : runPreloaded(bin(), [xmlPath], MODE_ENV[mode], 20_000);
  assert.equal(r.signal, null, `${mode}: killed by ${r.signal}\n${r.stderr}`);
  assert.equal(r.status, 0, `${mode}: exit ${r.status}\n${r.stderr}`);
  const kv = new Map<string, string>();
  for (const line of r.stdout.split('\n')) {
    if (line === '') continue;
    const m = /^([a-z0-9_.]+)=(.*)$/.exec(line);
    assert.ok(m, `${mode}: bad line ${JSON.stringify(line)}`);
    assert.ok(!kv.has(m[1]!), `${mode}: ${m[1]} printed twice`);
    kv.set(m[1]!, m[2]!);
  }
  res = { kv, stderr: r.stderr, xml: readFileSync(xmlPath, 'utf8') };
  for (const [k, v] of Object.entries(MODE_STATE[mode])) assert.equal(kv.get(k), v, `${mode}: ${k}`);
  results.set(mode, res);
  return res;
}

/** The claims that distinguish mimalloc's answer from glibc's (empty arena) answer, as a list of
 * failures, so that the control can show they fail on glibc's numbers. */
function allocatorHoldsTheLiveBytes(r: Result): string[] {
  const failures: string[] = [];
  if (!(num(r, 'live.arena') >= LIVE)) failures.push(`live.arena=${num(r, 'live.arena')} < 100 MiB`);
  if (num(r, 'live.hblkhd') !== 0) failures.push(`live.hblkhd=${num(r, 'live.hblkhd')} != 0`);
  if (num(r, 'live.hblks') !== 0) failures.push(`live.hblks=${num(r, 'live.hblks')} != 0`);
  const current = xmlSystemCurrent(r.xml);
  if (!(current >= LIVE)) failures.push(`malloc_info <system type="current"> ${current} < 100 MiB`);
  return failures;
}

// ---- malloc_info: a small well-formedness check (node has no XML parser) --------------------
interface Elem {
  name: string;
  attrs: Map<string, string>;
  children: Elem[];
}

/** Parses the subset of XML that malloc_info writes (elements and attributes, whitespace
 * between tags, no text, no declaration); throws on anything malformed. */
function parseXml(text: string): Elem {
  const tag = /<(\/?)([A-Za-z_][\w.-]*)((?:\s+[A-Za-z_][\w.-]*="[^"<&]*")*)\s*(\/?)>/y;
  const attr = /([A-Za-z_][\w.-]*)="([^"<&]*)"/g;
  const stack: Elem[] = [];
  let root: Elem | undefined;
  let i = 0;
  for (;;) {
    while (i < text.length && /\s/.test(text[i]!)) i++;
    if (i === text.length) break;
    tag.lastIndex = i;
    const m = tag.exec(text);
    assert.ok(m, `malloc_info: not a tag at offset ${i}: ${JSON.stringify(text.slice(i, i + 40))}`);
    i = tag.lastIndex;
    const [, closing, name, attrText, selfClosing] = m;
    if (closing) {
      assert.ok(!selfClosing && attrText === '', `malloc_info: bad closing tag ${m[0]}`);
      const open = stack.pop();
      assert.equal(open?.name, name, `malloc_info: </${name}> closes ${open?.name ?? 'nothing'}`);
      continue;
    }
    const attrs = new Map<string, string>();
    for (const a of attrText!.matchAll(attr)) {
      assert.ok(!attrs.has(a[1]!), `malloc_info: attribute ${a[1]} twice in ${m[0]}`);
      attrs.set(a[1]!, a[2]!);
    }
    const e: Elem = { name: name!, attrs, children: [] };
    if (stack.length > 0) stack[stack.length - 1]!.children.push(e);
    else {
      assert.equal(root, undefined, 'malloc_info: more than one root element');
      root = e;
    }
    if (!selfClosing) stack.push(e);
  }
  assert.equal(stack.length, 0, `malloc_info: unclosed <${stack.map((e) => e.name).join('>, <')}>`);
  assert.ok(root, 'malloc_info: empty document');
  return root;
}

/** The document's skeleton: element paths, attribute names and `type`s, without the values
 * and without <sizes>' children (glibc lists its free-list bins there; mimalloc has none). */
function skeleton(e: Elem, path = ''): string[] {
  const here = `${path}/${e.name}[${[...e.attrs.keys()].sort().join(',')}]${e.attrs.has('type') ? `type=${e.attrs.get('type')}` : ''}`;
  if (e.name === 'sizes') return [here];
  return [here, ...e.children.flatMap((c) => skeleton(c, here))];
}

/** The top-level <system type="current" size=...>: what the allocator holds from the system. */
function xmlSystemCurrent(text: string): number {
  const root = parseXml(text);
  const e = root.children.find((c) => c.name === 'system' && c.attrs.get('type') === 'current');
  assert.ok(e, 'malloc_info: no top-level <system type="current">');
  return Number(e.attrs.get('size'));
}

// ---- malloc_stats: line shapes, from glibc's own output ----------------------------------
/** A line's shape: a right-aligned number at the end becomes as many '#' as its field is wide
 * (glibc's %10u), any other number 'N' ("Arena 0:"). */
function shape(line: string): string {
  return line.replace(/ *\d+$/, (m) => '#'.repeat(m.length)).replace(/\d+/g, 'N');
}

function statsLines(r: Result): string[] {
  assert.ok(r.stderr.endsWith('\n'), `malloc_stats output does not end a line: ${JSON.stringify(r.stderr)}`);
  return r.stderr.slice(0, -1).split('\n');
}

/** malloc_stats' value for `label` in the block that starts at `header`. */
function statsValue(r: Result, header: string, label: string): number {
  const lines = statsLines(r);
  const h = lines.indexOf(header);
  assert.ok(h >= 0, `malloc_stats: no ${header}`);
  const line = lines.slice(h + 1).find((l) => l.startsWith(label));
  assert.ok(line, `malloc_stats: no ${label} after ${header}`);
  return Number(line.slice(line.indexOf('=') + 1).trim());
}

// ---- the positive controls ---------------------------------------------------------------
test('positive control: plain glibc reports its own arena, which the checks below reject', () => {
  const g = resultOf('glibc');
  // glibc serves each 1 MiB block with its own mmap (above M_MMAP_THRESHOLD, 128 KiB by
  // default): hblks/hblkhd count them and its arena stays small
  assert.equal(num(g, 'live.hblks'), 100);
  assert.ok(num(g, 'live.hblkhd') >= LIVE, `glibc hblkhd ${num(g, 'live.hblkhd')}`);
  assert.ok(num(g, 'live.arena') < LIVE, `glibc arena ${num(g, 'live.arena')}`);
  // so the claims that the preloaded runs must meet fail on glibc's numbers: the test can fail
  const failures = allocatorHoldsTheLiveBytes(g);
  assert.ok(failures.length >= 3, `the checks did not reject glibc's numbers: ${failures.join('; ')}`);
  // glibc's malloc_stats and malloc_info are what the preloaded ones are compared with
  const arenas = statsLines(g).filter((l) => /^Arena \d+:$/.test(l));
  assert.equal(arenas.length, 1, `one arena expected from a single-threaded glibc run:\n${g.stderr}`);
  assert.equal(parseXml(g.xml).name, 'malloc');
});

// ---- the preloaded runs ------------------------------------------------------------------
for (const mode of PRELOADED) {
  test(`${mode}: mallinfo2 and mallinfo report mimalloc's memory`, () => {
    const r = resultOf(mode);
    assert.deepEqual(allocatorHoldsTheLiveBytes(r), []);
    const arena = num(r, 'live.arena');
    const used = num(r, 'live.uordblks');
    assert.equal(num(r, 'live.fordblks'), Math.max(0, arena - used), 'fordblks = arena - uordblks');
    // fields with nothing truthful to report in mimalloc's terms (introspect.c says why)
    for (const f of ['ordblks', 'smblks', 'usmblks', 'fsmblks', 'keepcost']) assert.equal(num(r, `live.${f}`), 0, f);
    // the deprecated int version: the same numbers, truncated to int as glibc does
    for (const f of ['arena', 'uordblks', 'fordblks', 'hblkhd'])
      assert.equal(num(r, `mallinfo.${f}`), num(r, `live.${f}`) | 0, `mallinfo.${f}`);
  });
}

test('preload, profiler stopped: uordblks is the documented upper bound, the commit', () => {
  const r = resultOf('preload');
  // no exact counters and no profiler: nothing better than the committed bytes exists
  assert.equal(num(r, 'live.uordblks'), num(r, 'live.arena'));
  assert.equal(num(r, 'live.fordblks'), 0);
  assert.ok(num(r, 'live.uordblks') >= LIVE);
});

test('exact counters: uordblks counts the live blocks exactly', () => {
  const r = resultOf('events');
  const usable = num(r, 'usable_total');
  // Between the two mallinfo2 calls the fixture allocates only the 100 blocks, and the
  // counters add each block's usable size: the difference is exact.
  assert.equal(num(r, 'live.uordblks') - num(r, 'before.uordblks'), usable);
  // Tolerance for the total: usable >= requested, so 100 MiB is the floor; a 1 MiB request
  // is a power of two, on a boundary of mimalloc's size classes (4 per doubling), so its
  // rounding is far below 5 %; the rest is what was live before (stdio, the loader), which
  // before.uordblks measures.
  assert.ok(usable >= LIVE && usable <= LIVE * 1.05, `usable_total ${usable}`);
  const used = num(r, 'live.uordblks');
  assert.ok(used >= LIVE && used <= LIVE * 1.05 + num(r, 'before.uordblks'), `uordblks ${used}`);
  assert.ok(num(r, 'live.arena') >= used);
});

test('profiler sampling: uordblks is its unbiased estimate, within the sampling error', () => {
  const r = resultOf('sampled');
  // A block of S bytes is sampled with p = 1 - exp(-S/R) and then weighs S/p (Horvitz-Thompson).
  // For N = 100 blocks of S = 1 MiB at R = 64 KiB, p = 1 - exp(-16) ~ 1 - 1.1e-7: the estimate
  // of the blocks is N*S within sd = S * sqrt(N * (1-p)/p) ~ 3.4 KiB (the only way to be far
  // off is a block not sampled at all, probability N*(1-p) ~ 1.1e-5 per run). Allowed: 6 sd.
  const N = 100;
  const S = MiB;
  const p = -Math.expm1(-S / SAMPLE_INTERVAL);
  const sd = S * Math.sqrt((N * (1 - p)) / p);
  const tolerance = 6 * sd;
  const delta = num(r, 'live.uordblks') - num(r, 'before.uordblks');
  assert.ok(Math.abs(delta - N * S) <= tolerance, `estimate of the blocks ${delta}, expected ${N * S} +- ${tolerance.toFixed(0)}`);
  assert.ok(num(r, 'live.arena') >= num(r, 'live.uordblks'));
});

for (const mode of PRELOADED) {
  test(`${mode}: malloc_trim releases the freed 100 MiB and says so truthfully`, () => {
    const r = resultOf(mode);
    const released = num(r, 'rss_freed') - num(r, 'rss_trimmed');
    // mimalloc kept the freed blocks until the trim, which gave them back: the 1 is true
    assert.equal(num(r, 'trim'), 1);
    assert.ok(released >= LIVE / 2, `RSS fell by ${released} bytes across malloc_trim`);
    assert.ok(num(r, 'trimmed.arena') <= num(r, 'live.arena') - LIVE / 2, 'the commit fell too');
    // right after, with nothing freed since, there is nothing to release: the 0 is true as well
    assert.equal(num(r, 'trim_again'), 0);
    assert.ok(num(r, 'rss_trimmed') - num(r, 'rss_trimmed_again') < MiB);
  });

  test(`${mode}: malloc_stats prints glibc's lines from mimalloc's numbers`, () => {
    const r = resultOf(mode);
    const reference = statsLines(resultOf('glibc')).map(shape);
    assert.deepEqual(statsLines(r).map(shape), reference, `malloc_stats:\n${r.stderr}`);
    assert.ok(statsValue(r, 'Arena 0:', 'system bytes') >= LIVE);
    assert.ok(statsValue(r, 'Arena 0:', 'in use bytes') >= LIVE * 0.99);
    assert.equal(statsValue(r, 'Total (incl. mmap):', 'max mmap regions'), 0);
  });

  test(`${mode}: malloc_info writes glibc's document from mimalloc's numbers`, () => {
    const r = resultOf(mode);
    assert.equal(num(r, 'malloc_info'), 0);
    const root = parseXml(r.xml);
    assert.equal(root.name, 'malloc');
    assert.equal(root.attrs.get('version'), '1');
    assert.deepEqual(skeleton(root), skeleton(parseXml(resultOf('glibc').xml)), `malloc_info:\n${r.xml}`);
    assert.ok(xmlSystemCurrent(r.xml) >= LIVE);
    // options != 0: -1 and EINVAL, as malloc_info(3) documents (glibc itself returns EINVAL and
    // leaves errno alone; either way the call fails)
    assert.equal(num(r, 'malloc_info_bad'), -1);
    assert.equal(num(r, 'malloc_info_bad_errno'), 22);
    assert.notEqual(num(resultOf('glibc'), 'malloc_info_bad'), 0);
  });

  test(`${mode}: mallopt accepts and ignores every parameter, as glibc returns`, () => {
    const r = resultOf(mode);
    const g = resultOf('glibc');
    for (const k of ['mallopt.arena_max', 'mallopt.mmap_threshold', 'mallopt.unknown']) {
      assert.equal(num(r, k), 1, k);
      assert.equal(num(r, k), num(g, k), `${k}: glibc returns ${num(g, k)}`);
    }
  });
}
