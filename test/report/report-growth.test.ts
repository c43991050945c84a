/**
 * The report's search, Top table and growth view (issue 29, items 5 and 9) in real Chromium
 * (Debian's, driven by playwright-core as test/report/report.test.ts does), on synthetic
 * profiles whose figures are known exactly:
 *  - search matches `file:line` as drawn on the bars (control: the same frames as native
 *    functions, drawn without file:line, match nothing), and an invalid regular expression is
 *    said to be one (control: a valid one is not);
 *  - the Top table opens sorted by flat, on the allocation sites, not on thirty zero-flat
 *    root frames (control: sorted by cum, root frames come first);
 *  - the growth chart has axes with values and labels, a point per fitted profile, the exit
 *    profile drawn apart and not fitted; two processes get one analysis each.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { after, before, test } from 'node:test';

import { chromium, type Browser, type Page } from 'playwright-core';

import { htmlReport } from '../../src/report/index.js';
import type { Profile } from '../../src/profile/model.js';
import { makeProfile } from '../profile/util.js';
import { root, tempDir } from '../helpers.js';

const artifacts = join(root, 'build', 'report');
const CHROMIUM = ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find((p) => existsSync(p));
const MiB = 1 << 20;
const TYPES: [string, string][] = [
  ['inuse_objects', 'count'],
  ['inuse_space', 'bytes'],
];
let browser: Browser;
let work: string;

before(async () => {
  mkdirSync(artifacts, { recursive: true });
  work = tempDir('mpp-report-growth-');
  assert.ok(CHROMIUM, 'chromium is not installed (npm test installs it: scripts/setup-test.mjs)');
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu'] });
});

after(async () => {
  await browser?.close();
});

/** Frames written `JS:name file:line` become JavaScript functions as run names them. */
function jsify(p: Profile): Profile {
  const st = p.stringTable;
  for (const f of p.function) {
    const m = /^JS:(\S+) (\S+):(\d+)$/.exec(st.strings[Number(f.name)]!);
    if (!m) continue;
    f.name = st.dedup(m[1]!);
    f.systemName = st.dedup(`JS:*${m[1]} ${m[2]}:${m[3]}:1`);
    f.filename = st.dedup(m[2]!);
    f.startLine = Number(m[3]);
  }
  for (const l of p.location) for (const ln of l.line) ln.line = p.function.find((f) => f.id === ln.functionId)!.startLine;
  return p;
}

async function open(html: string, name: string): Promise<{ page: Page; close: () => Promise<void> }> {
  const path = join(work, name);
  writeFileSync(path, html);
  const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  const page = await context.newPage();
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(pathToFileURL(path).href);
  await page.waitForFunction(() => (window as unknown as { __report?: { ready: boolean } }).__report?.ready === true, undefined, { timeout: 10_000 }).catch(() => {
    throw new Error(`the report did not become ready: ${errors.join('; ')}`);
  });
  assert.deepEqual(errors, []);
  return { page, close: () => context.close() };
}

const ROOTS = Array.from({ length: 30 }, (_, i) => (i === 29 ? '_start' : i === 28 ? '__libc_start_main' : i === 20 ? 'uv_run' : `root_frame_${i}`));

/** Two JavaScript functions named handle in two files, under thirty root frames. */
function handles(js: boolean): Profile {
  const fn = (file: string, line: number) => (js ? `JS:handle ${file}:${line}` : `handle_${file}:${line}`);
  return jsify(
    makeProfile({
      types: TYPES,
      samples: [
        { stack: ['malloc', js ? fn('/srv/a.mjs', 3) : 'handle', ...ROOTS], values: [3, 3 * MiB] },
        { stack: ['calloc', js ? fn('/srv/b.mjs', 7) : 'handle', ...ROOTS], values: [5, 5 * MiB] },
      ],
    }),
  );
}

async function search(page: Page, pattern: string): Promise<{ text: string; matched: number; error: boolean }> {
  await page.fill('#search', pattern);
  await page.waitForFunction((p) => document.getElementById('search-result')!.textContent!.includes('matched') && (document.getElementById('search') as HTMLInputElement).value === p, pattern);
  const result = page.locator('#search-result');
  return { text: await result.innerText(), matched: Number(await result.getAttribute('data-matched')), error: (await result.getAttribute('class'))?.includes('error') === true };
}

test('search matches file:line as drawn on the bars and says when a pattern is invalid; controls: native frames without file:line, a valid pattern', async () => {
  const { page, close } = await open(htmlReport([{ profile: handles(true), source: 'handles.pb.gz' }]), 'handles.html');
  try {
    assert.ok(await page.locator('#flame .fg', { hasText: 'handle /srv/b.mjs:7' }).count(), 'the bar shows file:line');
    const byLine = await search(page, 'b.mjs:7');
    assert.equal(byLine.matched, 5 * MiB, byLine.text);
    assert.match(byLine.text, /^matched 1 function: 5\.00MiB \(62\.50%\)$/);
    assert.equal(await page.locator('#flame .fg.match').allInnerTexts().then((t) => t.join('|')), 'handle /srv/b.mjs:7');
    const byFile = await search(page, '/srv/.*\\.mjs');
    assert.equal(byFile.matched, 8 * MiB, 'both functions, by their files');
    assert.match(byFile.text, /^matched 2 functions/);
    // an invalid pattern: said so, and matched as plain text
    const invalid = await search(page, 'handle (/srv');
    assert.ok(invalid.error, invalid.text);
    assert.match(invalid.text, /^not a valid regular expression \(.*\): matched as plain text; matched 0 functions: 0B/);
    const literal = await search(page, 'b.mjs:7 (');
    assert.ok(literal.error);
    // control: a valid pattern carries no error
    const valid = await search(page, 'handle');
    assert.ok(!valid.error, valid.text);
    assert.equal(valid.matched, 8 * MiB);
    await page.screenshot({ path: join(artifacts, 'search-file-line.png') });
  } finally {
    await close();
  }
  // control: the same stacks with native frames (no file:line drawn) do not match by line
  const control = await open(htmlReport([{ profile: handles(false), source: 'native.pb.gz' }]), 'native.html');
  try {
    assert.equal((await search(control.page, 'b.mjs:7 ')).matched, 0);
  } finally {
    await control.close();
  }
});

test('the Top table opens sorted by flat on the allocation sites, not on zero-flat root frames; control: by cum the root frames come first', async () => {
  const { page, close } = await open(htmlReport([{ profile: handles(true), source: 'handles.pb.gz' }]), 'top.html');
  try {
    assert.equal(await page.locator('#top th[data-sort="flat"]').getAttribute('aria-sort'), 'descending');
    const names = await page.locator('#top tbody td.name').allInnerTexts();
    assert.deepEqual(names.slice(0, 2), ['calloc', 'malloc']);
    const firstFlat = await page.locator('#top tbody tr').first().locator('td').first().innerText();
    assert.equal(firstFlat, '5.00MiB');
    await page.click('#top th[data-sort="cum"]');
    assert.equal(await page.locator('#top th[data-sort="cum"]').getAttribute('aria-sort'), 'descending');
    const byCum = await page.locator('#top tbody td.name').allInnerTexts();
    assert.ok(ROOTS.includes(byCum[0]!), `by cum: ${byCum.slice(0, 3).join(', ')}`);
    await page.click('#top th[data-sort="flat"]');
    assert.equal((await page.locator('#top tbody td.name').allInnerTexts())[0], 'calloc');
  } finally {
    await close();
  }
});

/** Periodic profiles of `pid`, leaking `rate` bytes a second under thirty root frames. */
function series(pid: number, rate: number, t0: number, n: number): { profile: Profile; source: string }[] {
  return Array.from({ length: n }, (_, t) => {
    const p = jsify(
      makeProfile({
        types: TYPES,
        samples: [
          { stack: ['operator new', `JS:remember /srv/${pid}.mjs:9`, ...ROOTS], values: [t + 1, (t + 1) * rate] },
          { stack: ['steady', ...ROOTS], values: [4, 16 * MiB] },
        ],
        comments: [`mimalloc-pprof interval=524288 pid=${pid} peak_rss=${1e8 + t}`, `mimalloc-pprof 0.1.0 run --every: profile ${t + 1} of pid=${pid}`],
      }),
    );
    p.timeNanos = BigInt(Math.round((t0 + t * 2) * 1e9));
    return { profile: p, source: `app.${pid}.${t + 1}.pb.gz` };
  });
}

test('the growth chart has axes with values; the exit profile is drawn apart, not fitted; two processes, one analysis each', async () => {
  const exit = makeProfile({
    types: TYPES,
    samples: [{ stack: ['operator new', 'main'], values: [6, 6 * MiB] }],
    comments: ['mimalloc-pprof interval=524288 pid=4242 peak_rss=100000009', 'mimalloc-pprof 0.1.0 run: interval=524288 seed=none pid=4242', 'command: node app.js'],
  });
  exit.timeNanos = BigInt(1_700_000_011 * 1e9);
  const profiles = [...series(4242, MiB, 1_700_000_000, 5), { profile: exit, source: 'app.pb.gz' }, ...series(4343, 2 * MiB, 1_700_000_001, 4)];
  const { page, close } = await open(htmlReport(profiles), 'growth-axes.html');
  try {
    const sections = page.locator('.growth-process');
    assert.equal(await sections.count(), 2);
    assert.deepEqual(await page.locator('.growth-process h3').allInnerTexts(), ['pid 4242 (node app.js)', 'pid 4343']);
    const chart = page.locator('#growth-chart svg');
    // axes: lines, tick values, labels
    const xTicks = await chart.locator('.x-axis text.tick').allTextContents();
    assert.deepEqual(xTicks, ['0', '5', '10'], 'seconds');
    const yTicks = await chart.locator('.y-axis text.tick').allTextContents();
    assert.equal(yTicks[0], '0B');
    assert.ok(yTicks.includes('20.0MiB'), yTicks.join(' '));
    assert.equal(await chart.locator('.x-axis .axis-label').innerHTML(), 'seconds since the first profile');
    assert.equal(await chart.locator('.y-axis .axis-label').innerHTML(), 'inuse_space (bytes)');
    // a point per fitted profile; the exit profile apart, with its value
    assert.equal(await chart.locator('circle.point').count(), 5);
    assert.equal(await chart.locator('circle.other.exit').count(), 1);
    assert.match(await chart.locator('text', { hasText: 'exit:' }).innerHTML(), /^exit: 6\.00MiB$/);
    assert.match(await page.locator('#growth-caption').innerText(), /^inuse_space: 17\.0MiB → 21\.0MiB over 8\.0 s \(5 profiles\); exit profile 6\.00MiB at 11\.0 s, not fitted/);
    // where it grows: the JavaScript function under thirty root frames, first, at its rate
    const first = await page.locator('#growth tbody tr').first().innerText();
    assert.match(first, /^512\.0KiB\/s\t.*\tgrows\t/);
    assert.match(first, /operator new\nvia remember \/srv\/4242\.mjs:9 ← … ← _start \(31 callers\)/);
    assert.match(await page.locator('#growth-2 tbody tr').first().innerText(), /^1\.00MiB\/s\t[\s\S]*via remember \/srv\/4343\.mjs:9/);
    await page.screenshot({ path: join(artifacts, 'growth-axes.png'), fullPage: true });
  } finally {
    await close();
  }
  // control: one profile, no growth view
  const single = await open(htmlReport([profiles[0]!]), 'single.html');
  try {
    assert.equal(await single.page.locator('#growth-section').isHidden(), true);
    assert.equal(await single.page.locator('.growth-chart').count(), 0);
  } finally {
    await single.close();
  }
});
