/**
 * The HTML report in a real browser: Debian's chromium driven by playwright-core (the
 * browser's own executable; nothing downloaded). Reports of real profiles (a Node program
 * under `run --html`, a C program, a Go heap profile written by the Go runtime) are opened
 * from file://, with every request that is not the page itself recorded and refused (its
 * control: the same page without its Content-Security-Policy and with an image, whose request
 * is seen). The tests assert what is rendered, click to zoom, type a search and compare its
 * total with `top`, switch the sample type and the filters, and save screenshots under
 * build/report/.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { after, before, test } from 'node:test';

import { chromium, type Browser, type Page } from 'playwright-core';

import { htmlReport } from '../../src/report/index.js';
import { encodeProfile, findSampleType, parseProfile, top } from '../../src/profile/index.js';
import { makeProfile } from '../profile/util.js';
import { root, tempDir } from '../helpers.js';

const cli = join(root, 'dist', 'src', 'cli', 'bin.js');
const artifacts = join(root, 'build', 'report');
const fixtures = join(root, 'test', 'report', 'fixtures');
let work: string;
let browser: Browser;

const CHROMIUM = ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find((p) => existsSync(p));

before(async () => {
  mkdirSync(artifacts, { recursive: true });
  work = tempDir('mpp-report-');
  assert.ok(CHROMIUM, 'chromium is not installed (npm test installs it: scripts/setup-test.mjs)');
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu'] });
});

after(async () => {
  await browser?.close();
});

function mpp(args: string[], cwd = work) {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== 'LD_PRELOAD' && !k.startsWith('MIMALLOC_') && k !== 'NODE_OPTIONS'));
  const r = spawnSync(process.execPath, [cli, ...args], { cwd, env, encoding: 'utf8', timeout: 120_000 });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** Opens `html` from file://; requests other than the page are recorded and refused. */
async function open(html: string): Promise<{ page: Page; requests: string[]; close: () => Promise<void> }> {
  const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  const requests: string[] = [];
  const url = pathToFileURL(html).href;
  await context.route('**/*', (route) => {
    const u = route.request().url();
    if (u === url) return route.continue();
    requests.push(u);
    return route.abort();
  });
  const page = await context.newPage();
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(url);
  await page.waitForFunction(() => (window as unknown as { __report?: { ready: boolean } }).__report?.ready === true, undefined, { timeout: 10_000 }).catch(() => {
    throw new Error(`the report did not become ready: ${errors.join('; ')}`);
  });
  assert.deepEqual(errors, []);
  return { page, requests, close: () => context.close() };
}

const readyMs = (page: Page) => page.evaluate(() => (window as unknown as { __report: { readyMs: number } }).__report.readyMs);

test('run --html on a Node program: its JavaScript functions are on the page, no network request, under 2 MB; zoom and sample types work', async () => {
  const r = mpp(['run', '--html', '--out', 'node.pb.gz', '--', process.execPath, join(fixtures, 'retain.mjs')]);
  assert.equal(r.status, 0, r.stderr);
  const html = join(work, 'node.html');
  assert.match(r.stderr, /wrote .*node\.html/);
  assert.ok(statSync(html).size <= 2 << 20, `${statSync(html).size} bytes`);
  const { page, requests, close } = await open(html);
  try {
    const js = await page.locator('#js tbody').innerText();
    assert.match(js, /retainBuffersForReport .*retain\.mjs:\d+/);
    assert.match(js, /retainSmallerBuffers .*retain\.mjs:\d+/);
    // the function's widest bar: it can show in more than one place, where its samples' stacks
    // differ below it (a clean-clone CI run hovered a 512 KiB bar of 2 samples, not its 24 MiB)
    const bars = page.locator('#flame .fg', { hasText: 'retainBuffersForReport' });
    let bar = bars.first();
    let widest = -1;
    for (let i = 0; i < (await bars.count()); i++) {
      const box = await bars.nth(i).boundingBox();
      if (box !== null && box.width > widest) [widest, bar] = [box.width, bars.nth(i)];
    }
    assert.ok(await bar.isVisible());
    // the header: what a reader needs to trust the numbers
    const header = await page.locator('#header').innerText();
    for (const row of ['program', 'pid', 'command line', 'sampling interval\t524288 bytes', 'samples', 'native in use (estimate)', 'standard error', 'resident set']) {
      assert.ok(header.includes(row), `header lacks ${row}:\n${header}`);
    }
    // hover: the function, its file and line, every sample type, its share
    await bar.hover();
    const tip = await page.locator('#tooltip').innerText();
    assert.match(tip, /^retainBuffersForReport\n.*retain\.mjs:\d+\n/);
    assert.match(tip, /inuse_space: [\d.]+MiB/);
    assert.match(tip, /share: [\d.]+% of inuse_space/);
    await page.screenshot({ path: join(artifacts, 'node.png'), fullPage: false });
    console.log(`# report of the Node program ready ${(await readyMs(page)).toFixed(0)} ms after navigation started`);

    // zoom: the clicked function becomes the root
    await bar.click();
    assert.match(await page.locator('#flame-total').innerText(), /under retainBuffersForReport/);
    assert.ok(!(await page.locator('#flame .fg', { hasText: 'retainSmallerBuffers' }).count()), 'zoomed in, the other branch is gone');
    await page.click('#reset-zoom');
    assert.ok(await page.locator('#flame .fg', { hasText: 'retainSmallerBuffers' }).count());

    // sample types: the objects count replaces the bytes
    const types = await page.locator('#type option').allInnerTexts();
    assert.deepEqual(types, ['alloc_objects (count)', 'alloc_space (bytes)', 'inuse_objects (count)', 'inuse_space (bytes)']);
    assert.match(await page.locator('#flame-total').innerText(), /MiB inuse_space/);
    await page.selectOption('#type', { label: 'inuse_objects (count)' });
    assert.match(await page.locator('#flame-total').innerText(), /^[\d,]+ inuse_objects/);

    // filters: leaving out the native heap leaves the JavaScript heap only
    const heapNative = page.locator('#filters input[data-key="heap"][value="native"]');
    if (await heapNative.count()) {
      await page.selectOption('#type', { label: 'inuse_space (bytes)' });
      await heapNative.uncheck();
      assert.ok(!(await page.locator('#flame .fg', { hasText: 'NodeArrayBufferAllocator' }).count()));
      await heapNative.check();
      assert.ok(await page.locator('#flame .fg', { hasText: 'NodeArrayBufferAllocator' }).count());
    }
    assert.deepEqual(requests, []);
  } finally {
    await close();
  }

  // the recorder's control: the same page without its policy, plus an image from the network
  const leaky = join(work, 'leaky.html');
  writeFileSync(
    leaky,
    readFileSync(html, 'utf8')
      .replace(/<meta http-equiv="Content-Security-Policy"[^>]*>/, '')
      .replace('</body>', '<img src="http://203.0.113.7/pixel.png"></body>'),
  );
  const control = await open(leaky);
  try {
    await control.page.waitForTimeout(200);
    assert.deepEqual(control.requests, ['http://203.0.113.7/pixel.png']);
  } finally {
    await control.close();
  }
});

test('the bundled Node demo under run --html: the functions that hold its memory are in the JavaScript table and the flame graph', async () => {
  const r = mpp(['run', '--html', '--out', 'demo.pb.gz', '--', process.execPath, join(root, 'examples', 'demo-node.cjs')]);
  assert.equal(r.status, 0, r.stderr);
  const { page, requests, close } = await open(join(work, 'demo.html'));
  try {
    const js = await page.locator('#js tbody').innerText();
    for (const fn of ['renderResponse', 'handleRequest']) assert.match(js, new RegExp(`${fn} .*demo-node\\.cjs:\\d+`), js);
    assert.ok(await page.locator('#flame .fg', { hasText: 'renderResponse' }).count());
    assert.deepEqual(requests, []);
    await page.screenshot({ path: join(artifacts, 'demo.png') });
  } finally {
    await close();
  }
});

test('search on a C program\'s report: the matched total is top\'s cumulative figure (within 1 %)', async () => {
  const exe = join(work, 'two_sites');
  const cc = spawnSync('cc', ['-O1', '-g', '-fno-omit-frame-pointer', '-o', exe, join(fixtures, 'two_sites.c')], { encoding: 'utf8' });
  assert.equal(cc.status, 0, cc.stderr);
  const r = mpp(['run', '--html', '--out', 'c.pb.gz', '--', exe]);
  assert.equal(r.status, 0, r.stderr);
  const profile = parseProfile(readFileSync(join(work, 'c.pb.gz')));
  const inuse = findSampleType(profile, 'inuse_space');
  const { page, requests, close } = await open(join(work, 'c.html'));
  try {
    for (const fn of ['hold_big_blocks', 'hold_small_blocks']) {
      const expected = top(profile, inuse).find((row) => row.name === fn)?.cum;
      assert.ok(expected !== undefined && expected > 0, `${fn} is not in the profile`);
      await page.fill('#search', fn);
      await page.waitForFunction((name) => document.getElementById('search-result')!.textContent!.includes('matched'), fn);
      const matched = Number(await page.locator('#search-result').getAttribute('data-matched'));
      assert.ok(Math.abs(matched - expected) <= 0.01 * expected, `${fn}: page ${matched}, top ${expected}`);
      assert.ok((await page.locator('#flame .fg.match', { hasText: fn }).count()) > 0, `${fn} is not highlighted`);
      // the top table lists it, with the same cumulative figure
      assert.match(await page.locator('#top tbody').innerText(), new RegExp(fn));
    }
    await page.screenshot({ path: join(artifacts, 'c-search.png') });
    // sortable: by name puts the rows in order
    await page.click('#top th[data-sort="name"]');
    const names = await page.locator('#top tbody td.name').allInnerTexts();
    assert.deepEqual(names, [...names].sort());
    assert.equal(await page.locator('#js-section').isHidden(), true, 'a C program has no JavaScript table');
    assert.deepEqual(requests, []);
  } finally {
    await close();
  }
});

test('a heap profile written by the Go runtime renders', async (t) => {
  const goDir = join(root, 'build', 'test', 'go-heap');
  const profile = join(goDir, 'heap.pb.gz');
  if (!existsSync(profile)) {
    mkdirSync(goDir, { recursive: true });
    writeFileSync(
      join(goDir, 'main.go'),
      `package main

import (
	"os"
	"runtime"
	"runtime/pprof"
)

var keep [][]byte

//go:noinline
func leakyGoFunction() {
	for i := 0; i < 256; i++ {
		keep = append(keep, make([]byte, 64<<10))
	}
}

func main() {
	runtime.MemProfileRate = 4096
	leakyGoFunction()
	runtime.GC()
	f, err := os.Create(os.Args[1])
	if err != nil {
		panic(err)
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		panic(err)
	}
	f.Close()
}
`,
    );
    const go = spawnSync('go', ['run', 'main.go', profile], {
      cwd: goDir,
      encoding: 'utf8',
      timeout: 240_000,
      env: { ...process.env, GOCACHE: join(goDir, 'cache'), GOPATH: join(goDir, 'gopath'), GO111MODULE: 'off', GOFLAGS: '-mod=mod' },
    });
    if (go.error) return t.skip(`go is not available: ${go.error.message}`);
    assert.equal(go.status, 0, go.stderr);
  }
  const html = join(work, 'go.html');
  const r = mpp(['report', profile, '-o', html]);
  assert.equal(r.status, 0, r.stderr);
  const { page, requests, close } = await open(html);
  try {
    assert.match(await page.locator('#top tbody').innerText(), /main\.leakyGoFunction/);
    assert.ok(await page.locator('#flame .fg', { hasText: 'main.leakyGoFunction' }).count());
    assert.deepEqual(requests, []);
    await page.screenshot({ path: join(artifacts, 'go.png') });
  } finally {
    await close();
  }
});

test('several profiles of one process: the growth view names the function that grows', async () => {
  const paths: string[] = [];
  for (let i = 0; i < 5; i++) {
    const p = makeProfile({
      types: [
        ['inuse_objects', 'count'],
        ['inuse_space', 'bytes'],
      ],
      samples: [
        { stack: ['growingCache', 'handleRequest', 'main'], values: [10 * (i + 1), (i + 1) * 8 << 20] },
        { stack: ['steadyPool', 'main'], values: [40, 16 << 20] },
      ],
    });
    p.timeNanos = BigInt(1_700_000_000_000 + i * 10_000) * 1_000_000n;
    const path = join(work, `series.${i}.pb.gz`);
    writeFileSync(path, encodeProfile(p));
    paths.push(path);
  }
  const html = join(work, 'growth.html');
  const r = mpp(['report', ...paths.reverse(), '-o', html]); // time order comes from the profiles
  assert.equal(r.status, 0, r.stderr);
  const { page, close } = await open(html);
  try {
    assert.equal(await page.locator('#growth-section').isVisible(), true);
    const first = await page.locator('#growth tbody tr').first().innerText();
    assert.match(first, /growingCache/);
    assert.match(first, /^819\.2KiB\/s\t.*\tgrows\t/); // 8 MiB per 10 s: 838 861 bytes a second, exact here
    assert.match(await page.locator('#growth-caption').innerText(), /^inuse_space: 24\.0MiB → 56\.0MiB over 40\.0 s \(5 profiles\)$/);
    assert.equal(await page.locator('#growth svg polyline').count() > 1, true);
    await page.screenshot({ path: join(artifacts, 'growth.png'), fullPage: true });
  } finally {
    await close();
  }
});

test('a 10 000-sample profile makes a report under 2 MB that opens', async () => {
  const samples = Array.from({ length: 10_000 }, (_, i) => ({
    stack: Array.from({ length: 30 }, (_, d) => `fn_${d}_${(i >> (d % 12)) % 97}`),
    values: [1 + (i % 7), 4096 * (1 + (i % 13))],
  }));
  const p = makeProfile({
    types: [
      ['inuse_objects', 'count'],
      ['inuse_space', 'bytes'],
    ],
    samples,
  });
  const html = join(work, 'big.html');
  writeFileSync(html, htmlReport([{ profile: p, source: 'big.pb.gz' }]));
  const size = statSync(html).size;
  assert.ok(size <= 2 << 20, `${size} bytes`);
  const { page, close } = await open(html);
  try {
    console.log(`# 10 000-sample report: ${(size / 1048576).toFixed(2)} MiB, ready ${(await readyMs(page)).toFixed(0)} ms after navigation started`);
    assert.ok((await page.locator('#flame .fg').count()) > 10);
  } finally {
    await close();
  }
});

test('report: a file that is not a profile is one line and exit 2', () => {
  const bad = join(work, 'bad.pb.gz');
  writeFileSync(bad, 'not a profile');
  const r = mpp(['report', bad, '-o', join(work, 'bad.html')]);
  assert.equal(r.status, 2);
  assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
  assert.ok(!existsSync(join(work, 'bad.html')));
});
