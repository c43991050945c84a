/** The public C API (mi_prof_*) and the MIMALLOC_* environment, through the `api` fixture
 * (a sub-command in argv[1], results as `key=value` lines). */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, readdirSync, statSync, writeFileSync, mkdirSync, chmodSync } from 'node:fs';
import { dirname, join } from 'node:path';

import { fixture, parseHeapText, pprofRaw, runPreloaded, sampleValue, stackHas, tempDir, type Run } from '../helpers.js';

const DEFAULT_INTERVAL = 524288;
const PREFIX = 'mimalloc-pprof: ';

function bin(): string {
  return fixture('api');
}

/** Runs the fixture under the preload; the exit must be clean. */
function api(args: string[], env: Record<string, string> = {}): Run {
  const r = runPreloaded(bin(), args, env, 20_000);
  assert.equal(r.signal, null, `api ${args.join(' ')}: killed by ${r.signal}\n${r.stderr}`);
  assert.equal(r.status, 0, `api ${args.join(' ')}: exit ${r.status}\n${r.stderr}`);
  return r;
}

class KV {
  readonly map = new Map<string, string>();
  constructor(readonly text: string) {
    for (const line of text.split('\n')) {
      const i = line.indexOf('=');
      if (i > 0) this.map.set(line.slice(0, i), line.slice(i + 1));
    }
  }
  str(key: string): string {
    const v = this.map.get(key);
    assert.ok(v !== undefined, `no ${key}= in output:\n${this.text}`);
    return v;
  }
  num(key: string): number {
    const v = Number(this.str(key));
    assert.ok(Number.isFinite(v), `${key}=${this.str(key)} is not a number`);
    return v;
  }
}

const kv = (r: Run): KV => new KV(r.stdout);

function stderrLines(r: Run): string[] {
  return r.stderr.split('\n').filter((l) => l !== '');
}

/** Exactly one line on stderr, a warning naming the variable and the value. */
function assertOneWarning(r: Run, variable: string, value: string): void {
  const lines = stderrLines(r);
  assert.equal(lines.length, 1, `expected exactly one warning line, got:\n${r.stderr}`);
  const line = lines[0]!;
  assert.ok(line.startsWith(PREFIX), line);
  assert.ok(line.includes(variable), `warning does not name ${variable}: ${line}`);
  assert.ok(line.includes(value), `warning does not show the value ${JSON.stringify(value)}: ${line}`);
}

/** Deepest stack (frames) among the rows of a heap_v2 text profile. */
function maxDepth(file: string): number {
  const heap = parseHeapText(readFileSync(file, 'utf8'));
  assert.ok(heap.rows.length > 0, 'profile has no rows');
  return Math.max(...heap.rows.map((row) => row.stack.length));
}

/** Files left in a directory, sorted; temporary dump files would show here. */
function listing(dir: string): string[] {
  return readdirSync(dir).sort();
}

// ---- environment ----------------------------------------------------------------------------

test('an invalid MIMALLOC_PROF_SAMPLE_INTERVAL warns once, naming the variable, and the default applies', () => {
  for (const bad of ['abc', '0', '64q', '-5', '5k5', ' 5', '99999999999999999999999']) {
    const r = api(['stats'], { MIMALLOC_PROF: '1', MIMALLOC_PROF_SAMPLE_INTERVAL: bad });
    assertOneWarning(r, 'MIMALLOC_PROF_SAMPLE_INTERVAL', bad.trim());
    const s = kv(r);
    assert.equal(s.num('running'), 1, `profiling still starts with ${bad}`);
    assert.equal(s.num('sample_interval'), DEFAULT_INTERVAL, `default interval with ${JSON.stringify(bad)}`);
  }
  // control: a valid value is used silently
  const ok = api(['stats'], { MIMALLOC_PROF: '1', MIMALLOC_PROF_SAMPLE_INTERVAL: '1000' });
  assert.equal(ok.stderr, '');
  assert.equal(kv(ok).num('sample_interval'), 1000);
});

test('sizes accept k/m/g suffixes (powers of 1024) and hex', () => {
  const cases: Array<[string, number]> = [
    ['4096', 4096],
    ['64k', 65536],
    ['64K', 65536],
    ['2KiB', 2048],
    ['1m', 1 << 20],
    ['3M', 3 << 20],
    ['1g', 1 << 30],
    ['0x1000', 4096],
  ];
  for (const [value, bytes] of cases) {
    const r = api(['stats'], { MIMALLOC_PROF: '1', MIMALLOC_PROF_SAMPLE_INTERVAL: value });
    assert.equal(r.stderr, '', `${value}: no warning`);
    assert.equal(kv(r).num('sample_interval'), bytes, `MIMALLOC_PROF_SAMPLE_INTERVAL=${value}`);
  }
});

test('MIMALLOC_PROF_SAMPLE_INTERVAL wins over MIMALLOC_PROF_SAMPLE_RATE; RATE alone works', () => {
  const both = api(['stats'], {
    MIMALLOC_PROF: '1',
    MIMALLOC_PROF_SAMPLE_RATE: '2000',
    MIMALLOC_PROF_SAMPLE_INTERVAL: '1000',
  });
  assert.equal(both.stderr, '');
  assert.equal(kv(both).num('sample_interval'), 1000);
  // the other order in the environment block changes nothing
  const reversed = api(['stats'], {
    MIMALLOC_PROF: '1',
    MIMALLOC_PROF_SAMPLE_INTERVAL: '1000',
    MIMALLOC_PROF_SAMPLE_RATE: '2000',
  });
  assert.equal(kv(reversed).num('sample_interval'), 1000);
  const rate = api(['stats'], { MIMALLOC_PROF: '1', MIMALLOC_PROF_SAMPLE_RATE: '2000' });
  assert.equal(rate.stderr, '');
  assert.equal(kv(rate).num('sample_interval'), 2000);
  const rateSuffix = api(['stats'], { MIMALLOC_PROF: '1', MIMALLOC_PROF_SAMPLE_RATE: '3k' });
  assert.equal(kv(rateSuffix).num('sample_interval'), 3072);
});

test('MIMALLOC_PROF_BT_MAX=0 and =500 are invalid: one warning each, and the default depth 32 applies', () => {
  const dir = tempDir();
  for (const bad of ['0', '500']) {
    const file = join(dir, `bt${bad}.heap`);
    const r = api(['stacks', '60', '1', file], {
      MIMALLOC_PROF: '1',
      MIMALLOC_PROF_SAMPLE_INTERVAL: '1',
      MIMALLOC_PROF_BT_MAX: bad,
    });
    assertOneWarning(r, 'MIMALLOC_PROF_BT_MAX', bad);
    assert.equal(kv(r).num('dump_ok'), 1);
    assert.equal(maxDepth(file), 32, `BT_MAX=${bad}: the default depth`);
  }
  // control: a valid depth is used silently (so the 32 above is not a ceiling of the walk)
  for (const [value, depth] of [['8', 8], ['48', 48]] as const) {
    const file = join(dir, `bt${value}.heap`);
    const r = api(['stacks', '60', '1', file], {
      MIMALLOC_PROF: '1',
      MIMALLOC_PROF_SAMPLE_INTERVAL: '1',
      MIMALLOC_PROF_BT_MAX: value,
    });
    assert.equal(r.stderr, '');
    assert.equal(maxDepth(file), depth, `BT_MAX=${value}`);
  }
});

test('MIMALLOC_PROF_DUMP_FORMAT=xml is invalid: one warning, and the dump at exit is text', () => {
  const dir = tempDir();
  const r = api(['workload'], {
    MIMALLOC_PROF: '1',
    MIMALLOC_PROF_DUMP_FORMAT: 'xml',
    MIMALLOC_PROF_DUMP_AT_EXIT: join(dir, 'x.%p.heap'),
  });
  assertOneWarning(r, 'MIMALLOC_PROF_DUMP_FORMAT', 'xml');
  const pid = kv(r).num('pid');
  const text = readFileSync(join(dir, `x.${pid}.heap`), 'utf8');
  assert.ok(text.startsWith('heap profile:'), text.slice(0, 40));
});

/** The mimalloc version in use, as mi_version() numbers it: the fixture asks the loaded one
 * (dlsym); a library with mimalloc linked in statically (the musl pass) exports none, and
 * runs the archive it was built from (<prefix>/lib), whose header names the version. */
function mimallocVersionNumber(): number {
  const archive = process.env.MIMALLOC_PPROF_TEST_MIMALLOC_STATIC ?? '';
  if (archive === '') return kv(api(['stats'])).num('mi_version');
  const header = readFileSync(join(dirname(dirname(archive)), 'include', 'mimalloc.h'), 'utf8');
  const m = /^#define MI_MALLOC_VERSION (\d+)/m.exec(header);
  assert.ok(m, 'no MI_MALLOC_VERSION in the static mimalloc\'s header');
  return Number(m[1]);
}

test('MIMALLOC_PROF_VERBOSE=1 prints one line at load: mimalloc version, "interposer active", profiler state', () => {
  const version = mimallocVersionNumber(); // 209 is 2.0.9; 20401 is 2.4.1
  const dotted =
    version >= 10000
      ? `${Math.floor(version / 10000)}.${Math.floor(version / 100) % 100}.${version % 100}`
      : `${Math.floor(version / 100)}.${Math.floor(version / 10) % 10}.${version % 10}`;

  const stopped = api(['mark'], { MIMALLOC_PROF_VERBOSE: '1' });
  const lines = stderrLines(stopped);
  // the line comes before main ("fixture main" is main's first act) and is the only one
  assert.equal(lines.length, 2, stopped.stderr);
  assert.equal(lines[1], 'fixture main');
  const line = lines[0]!;
  assert.ok(line.startsWith(PREFIX), line);
  assert.ok(line.includes(`mimalloc ${dotted}`), `version ${dotted} not named: ${line}`);
  assert.ok(line.includes('interposer active'), line);
  assert.match(line, /profiler stopped/);

  const running = api(['mark'], { MIMALLOC_PROF_VERBOSE: '1', MIMALLOC_PROF: '1', MIMALLOC_PROF_SAMPLE_INTERVAL: '4096' });
  const rl = stderrLines(running);
  assert.equal(rl.length, 2, running.stderr);
  assert.equal(rl[1], 'fixture main');
  assert.ok(rl[0]!.includes(`mimalloc ${dotted}`), rl[0]);
  assert.ok(rl[0]!.includes('interposer active'), rl[0]);
  assert.match(rl[0]!, /profiler running, interval 4096\b/);

  // control: without the variable, nothing but the fixture's own line
  assert.deepEqual(stderrLines(api(['mark'])), ['fixture main']);
});

// ---- lifecycle ------------------------------------------------------------------------------

test('mi_prof_start (and start_ex, start_seeded) return false while already running', () => {
  const r = kv(api(['start_twice']));
  assert.equal(r.num('was_running'), 0);
  assert.equal(r.num('first'), 1, 'the first start succeeds');
  assert.equal(r.num('second'), 0, 'a second start is refused');
  assert.equal(r.num('start_ex'), 0);
  assert.equal(r.num('start_seeded'), 0);
  // the refused starts changed nothing: the first start's interval stays
  assert.equal(r.num('running'), 1);
  assert.equal(r.num('sample_interval'), 4096);

  // started at load by MIMALLOC_PROF=1: even the first explicit start is refused
  const atLoad = kv(api(['start_twice'], { MIMALLOC_PROF: '1', MIMALLOC_PROF_SAMPLE_INTERVAL: '1000' }));
  assert.equal(atLoad.num('was_running'), 1);
  assert.equal(atLoad.num('first'), 0);
  assert.equal(atLoad.num('second'), 0);
  assert.equal(atLoad.num('sample_interval'), 1000);
});

test('mi_prof_stop discards every sample: live_samples 0 after stop and start', () => {
  const r = kv(api(['stop_discards']));
  // positive control: the 100 blocks were sampled (interval 1)
  assert.equal(r.num('before.running'), 1);
  assert.ok(r.num('before.live_samples') >= 100, `before.live_samples=${r.num('before.live_samples')}`);
  assert.equal(r.num('enabled_after_stop'), 0);
  assert.equal(r.num('stopped.running'), 0);
  assert.equal(r.num('stopped.live_samples'), 0);
  assert.equal(r.num('stopped.unique_stacks'), 0);
  assert.ok(r.num('stopped.profiler_bytes') < r.num('before.profiler_bytes'), 'stop releases profiler memory');
  assert.equal(r.num('restarted'), 1);
  // the 100 blocks are still allocated, but their samples are gone
  assert.equal(r.num('after.running'), 1);
  assert.equal(r.num('after.live_samples'), 0);
  assert.equal(r.num('after.live_sampled_bytes'), 0);
  assert.equal(r.num('freed.live_samples'), 0, 'freeing pre-stop blocks does not disturb the new profile');
  // and the restarted profiler samples again
  assert.equal(r.num('fresh.live_samples'), 10);
  assert.equal(r.num('fresh.live_sampled_bytes'), 640);
});

for (const [how, env] of [
  ['MIMALLOC_PROF_ACCUM=1', { MIMALLOC_PROF_ACCUM: '1', MIMALLOC_MEMORY_EVENTS: '1' }],
  ['mi_prof_start_ex accum', { MIMALLOC_MEMORY_EVENTS: '1' }],
] as const) {
  test(`mi_prof_reset clears the cumulative figures and keeps live samples (${how})`, () => {
    const r = kv(api(['reset', how.startsWith('MIMALLOC') ? 'env' : 'ex'], env));
    const d = (k: string, a: string, b: string): number => r.num(`${b}.${k}`) - r.num(`${a}.${k}`);
    // workload: 100 blocks allocated, 60 freed, at interval 1
    assert.equal(d('live_samples', 's0', 's1'), 40);
    assert.equal(d('accum_samples', 's0', 's1'), 100, 'accum counts every allocation');
    assert.ok(r.num('s1.estimated_accum_bytes') > r.num('s1.estimated_live_bytes'));
    // reset: live figures untouched, cumulative ones cleared (at most the live samples remain)
    assert.equal(r.num('s2.live_samples'), r.num('s1.live_samples'));
    assert.equal(r.num('s2.live_sampled_bytes'), r.num('s1.live_sampled_bytes'));
    assert.equal(r.num('s2.estimated_live_bytes'), r.num('s1.estimated_live_bytes'));
    assert.ok(r.num('s2.accum_samples') <= r.num('s2.live_samples'), `s2.accum_samples=${r.num('s2.accum_samples')}`);
    assert.ok(r.num('s2.accum_samples') < r.num('s1.accum_samples'));
    assert.ok(r.num('s2.estimated_accum_bytes') < r.num('s1.estimated_accum_bytes'));
    // exact cumulative counters are cleared too, exact live ones kept
    assert.equal(r.num('s2.memory_events'), 1);
    assert.ok(r.num('s1.exact_accum_objects') >= 100);
    assert.equal(r.num('s2.exact_accum_objects'), 0);
    assert.equal(r.num('s2.exact_accum_bytes'), 0);
    assert.equal(r.num('s2.exact_live_objects'), r.num('s1.exact_live_objects'));
    // and accumulation resumes from there
    assert.equal(d('accum_samples', 's2', 's3'), 10);
    assert.equal(d('live_samples', 's2', 's3'), 10);
    assert.equal(r.num('s3.exact_accum_objects'), 10);
  });
}

test('without accum, cumulative figures stay 0 (control for the reset test)', () => {
  const r = kv(api(['reset', 'env']));
  assert.equal(r.num('s1.live_samples') - r.num('s0.live_samples'), 40);
  assert.equal(r.num('s1.accum_samples'), 0);
  assert.equal(r.num('s1.estimated_accum_bytes'), 0);
});

// ---- mi_prof_start_ex ---------------------------------------------------------------------------

test('mi_prof_start_ex refuses NULL, a wrong size or version, a bad mode, depth or path with EINVAL', () => {
  const r = kv(api(['start_ex_bad']));
  for (const name of [
    'null',
    'size_small',
    'size_big',
    'size_zero',
    'version_zero',
    'version_next',
    'mode_bad',
    'depth_bad',
    'path_unterminated',
  ]) {
    assert.equal(r.num(`${name}.ok`), 0, `${name}: refused`);
    assert.equal(r.str(`${name}.errno`), 'EINVAL', `${name}: errno`);
    assert.equal(r.num(`${name}.running`), 0, `${name}: nothing started`);
  }
  // positive control: the same struct, well-formed, starts
  assert.equal(r.num('good.ok'), 1);
  assert.equal(r.num('good.running'), 1);
  assert.equal(r.num('while_running.ok'), 0);
  assert.equal(r.num('while_running.running'), 1);
});

test('mi_prof_start_ex: FALLBACK lets the environment win, OVERRIDE lets the struct win (interval)', () => {
  const env = { MIMALLOC_PROF_SAMPLE_INTERVAL: '1000' };
  const fallback = kv(api(['start_ex', 'fallback', '2000', '0', '0', '1', '1', '-'], env));
  assert.equal(fallback.num('ok'), 1);
  assert.equal(fallback.num('sample_interval'), 1000);
  const override = kv(api(['start_ex', 'override', '2000', '0', '0', '1', '1', '-'], env));
  assert.equal(override.num('ok'), 1);
  assert.equal(override.num('sample_interval'), 2000);
  // FALLBACK with nothing in the environment: the struct applies
  const unset = kv(api(['start_ex', 'fallback', '2000', '0', '0', '1', '1', '-']));
  assert.equal(unset.num('sample_interval'), 2000);
  // a zero field keeps the environment even in OVERRIDE mode
  const zero = kv(api(['start_ex', 'override', '0', '0', '0', '1', '1', '-'], env));
  assert.equal(zero.num('sample_interval'), 1000);
});

test('mi_prof_start_ex: FALLBACK / OVERRIDE for the stack depth', () => {
  const dir = tempDir();
  const env = { MIMALLOC_PROF_SAMPLE_INTERVAL: '1', MIMALLOC_PROF_BT_MAX: '5' };
  const depthOf = (mode: string): number => {
    const file = join(dir, `${mode}.heap`);
    const r = kv(api(['start_ex', mode, '0', '10', '0', '40', '1', file], env));
    assert.equal(r.num('ok'), 1);
    assert.equal(r.num('dump_ok'), 1, `dump: ${r.str('dump_errno')}`);
    return maxDepth(file);
  };
  assert.equal(depthOf('fallback'), 5);
  assert.equal(depthOf('override'), 10);
});

test('mi_prof_start_ex: FALLBACK / OVERRIDE for the profiler memory budget', () => {
  const budget = 256 * 1024;
  const env = { MIMALLOC_PROF_SAMPLE_INTERVAL: '1', MIMALLOC_PROF_MAX_BYTES: '256k' };
  const args = (mode: string) => ['start_ex', mode, '0', '0', String(64 << 20), '30', '100', '-'];
  const fallback = kv(api(args('fallback'), env));
  assert.equal(fallback.num('ok'), 1);
  assert.ok(fallback.num('dropped_samples') > 0, 'the environment budget applies');
  assert.ok(fallback.num('profiler_bytes') <= budget, `profiler_bytes=${fallback.num('profiler_bytes')}`);
  const override = kv(api(args('override'), env));
  assert.equal(override.num('ok'), 1);
  assert.equal(override.num('dropped_samples'), 0, 'the struct budget (64 MiB) applies');
  assert.ok(override.num('profiler_bytes') > budget);
  assert.equal(override.num('live_samples'), 3000);
});

// ---- mi_prof_stats_get ------------------------------------------------------------------------------

test('mi_prof_stats_get refuses a wrong size or version (writing nothing) and fills the struct otherwise', () => {
  const r = kv(api(['stats_bad']));
  assert.equal(r.num('null.ok'), 0);
  assert.equal(r.str('null.errno'), 'EINVAL');
  for (const name of ['size_small', 'size_big', 'size_zero', 'version_zero', 'version_next']) {
    assert.equal(r.num(`${name}.ok`), 0, `${name}: refused`);
    assert.equal(r.str(`${name}.errno`), 'EINVAL', `${name}: errno`);
    assert.equal(r.num(`${name}.untouched`), 1, `${name}: the struct was written`);
  }
  assert.equal(r.num('good.ok'), 1);
  assert.equal(r.num('good.size'), r.num('sizeof'));
  assert.equal(r.num('good.version'), 2);
  assert.equal(r.num('good.tail_untouched'), 1, 'nothing written past the struct');
  // version 1 (before the variance) is still served, and nothing is written past it
  assert.equal(r.num('v1.ok'), 1);
  assert.equal(r.num('v1.size'), r.num('sizeof') - 8);
  assert.equal(r.num('v1.version'), 1);
  assert.equal(r.num('v1.tail_untouched'), 1, 'a version-1 struct was written past its end');
  assert.ok(r.num('v1.live_samples') >= 20);
  // filled, not left as the 0xAB filler
  assert.equal(r.num('good.running'), 1);
  assert.equal(r.num('good.sample_interval'), 1);
  assert.ok(r.num('good.live_samples') >= 20);
  assert.ok(r.num('good.live_sampled_bytes') >= 2000);
  assert.ok(r.num('good.unique_stacks') >= 1);
  assert.ok(r.num('good.profiler_bytes') > 0);
  assert.equal(r.num('good.memory_events'), 0);
  assert.equal(r.num('good.exact_live_objects'), 0);
  assert.equal(r.num('good.dropped_samples'), 0);
});

// ---- dumps ----------------------------------------------------------------------------------------

test('mi_prof_dump fails with errno and leaves nothing behind: missing directory, file as directory, target is a directory', () => {
  const dir = tempDir();
  writeFileSync(join(dir, 'plain-file'), 'x');
  mkdirSync(join(dir, 'a-directory'));
  const cases: Array<[string, string, string]> = [
    ['missing directory', join(dir, 'no', 'such', 'dir', 'p.heap'), 'ENOENT'],
    ['parent is a regular file', join(dir, 'plain-file', 'p.heap'), 'ENOTDIR'],
    // the temporary file is created and written, then the rename fails: it must be removed
    ['target is a directory', join(dir, 'a-directory'), 'EISDIR'],
  ];
  for (const [what, path, errno] of cases) {
    for (const format of ['text', 'proto']) {
      const r = kv(api(['dump', path, format]));
      assert.equal(r.num('ok'), 0, `${what} (${format}): refused`);
      assert.equal(r.str('errno'), errno, `${what} (${format}): errno`);
      assert.deepEqual(listing(dir), ['a-directory', 'plain-file'], `${what} (${format}): left a file behind`);
      assert.deepEqual(listing(join(dir, 'a-directory')), []);
    }
  }
  // an empty or NULL path
  for (const path of ['', 'NULL']) {
    const r = kv(api(['dump', path, 'text']));
    assert.equal(r.num('ok'), 0);
    assert.equal(r.str('errno'), 'EINVAL', `path ${JSON.stringify(path)}`);
  }
});

test('mi_prof_dump over RLIMIT_FSIZE fails with EFBIG, removes the partial file, and the process survives', () => {
  const dir = tempDir();
  const r = api(['dump', join(dir, 'p.heap'), 'text', '100']);
  const s = kv(r);
  assert.equal(s.num('ok'), 0);
  assert.equal(s.str('errno'), 'EFBIG');
  assert.deepEqual(listing(dir), []);
});

test('a successful dump: mode 0600 whatever the umask, "%p" is the pid, no temporary file remains', () => {
  const dir = tempDir();
  const r = kv(api(['dump', join(dir, 'prof.%p.heap'), 'text']));
  assert.equal(r.num('ok'), 1, `errno=${r.str('errno')}`);
  const pid = r.num('pid');
  const file = join(dir, `prof.${pid}.heap`);
  assert.deepEqual(listing(dir), [`prof.${pid}.heap`]);
  assert.equal(statSync(file).mode & 0o777, 0o600);
  const heap = parseHeapText(readFileSync(file, 'utf8'));
  assert.equal(heap.header.interval, 1);
  assert.ok(heap.header.inuseCount >= 50, `inuse ${heap.header.inuseCount}`);
  assert.ok(heap.rows.some((row) => row.inuseCount === 50 && row.inuseBytes === 50_000), 'the 50 blocks of 1000 B');

  // replacing an existing file: the new one, still 0600
  const target = join(dir, 'existing.heap');
  writeFileSync(target, 'old contents\n');
  chmodSync(target, 0o644);
  const again = kv(api(['dump', target, 'text']));
  assert.equal(again.num('ok'), 1);
  assert.equal(statSync(target).mode & 0o777, 0o600);
  assert.ok(readFileSync(target, 'utf8').startsWith('heap profile:'));
  assert.deepEqual(listing(dir), ['existing.heap', `prof.${pid}.heap`]);
});

test('mi_prof_dump_proto writes a profile.proto that go tool pprof -raw reads', () => {
  const dir = tempDir();
  const r = kv(api(['dump', join(dir, 'prof.%p.pb'), 'proto']));
  assert.equal(r.num('ok'), 1, `errno=${r.str('errno')}`);
  const file = join(dir, `prof.${r.num('pid')}.pb`);
  assert.deepEqual(listing(dir), [`prof.${r.num('pid')}.pb`]);
  assert.equal(statSync(file).mode & 0o777, 0o600);
  assert.ok(!readFileSync(file).subarray(0, 13).toString('latin1').startsWith('heap profile:'));
  const p = pprofRaw(file, bin());
  assert.ok(p.types.includes('inuse_space'), p.types.join(','));
  const mine = p.samples.filter((s) => stackHas(s, 'leaf_alloc'));
  assert.ok(mine.length > 0, 'a sample symbolized to leaf_alloc');
  const objects = mine.reduce((a, s) => a + sampleValue(p, s, 'inuse_objects'), 0);
  assert.ok(objects >= 50, `inuse_objects ${objects}`);
});

test('MIMALLOC_PROF_DUMP_AT_EXIT writes the profile at exit, named by pid; DUMP_FORMAT=proto makes it a proto', () => {
  const dir = tempDir();
  const text = kv(
    api(['workload'], { MIMALLOC_PROF: '1', MIMALLOC_PROF_SAMPLE_INTERVAL: '4096', MIMALLOC_PROF_DUMP_AT_EXIT: join(dir, 'x.%p.heap') }),
  );
  const textFile = join(dir, `x.${text.num('pid')}.heap`);
  assert.ok(existsSync(textFile), `${textFile} missing; have ${listing(dir).join(', ')}`);
  assert.equal(statSync(textFile).mode & 0o777, 0o600);
  const heap = parseHeapText(readFileSync(textFile, 'utf8'));
  assert.equal(heap.header.interval, 4096);
  assert.ok(heap.header.inuseCount > 0);

  const proto = kv(
    api(['workload'], {
      MIMALLOC_PROF: '1',
      MIMALLOC_PROF_SAMPLE_INTERVAL: '4096',
      MIMALLOC_PROF_DUMP_FORMAT: 'proto',
      MIMALLOC_PROF_DUMP_AT_EXIT: join(dir, 'x.%p.heap'),
    }),
  );
  const protoFile = join(dir, `x.${proto.num('pid')}.heap`);
  assert.ok(existsSync(protoFile));
  assert.ok(!readFileSync(protoFile).toString('latin1').startsWith('heap profile:'), 'not text');
  const p = pprofRaw(protoFile, bin());
  assert.ok(p.samples.some((s) => stackHas(s, 'leaf_alloc')));
  assert.deepEqual(listing(dir), [`x.${proto.num('pid')}.heap`, `x.${text.num('pid')}.heap`].sort(), 'no temporary file');

  // control: with the profiler not running there is nothing to write at exit
  const off = tempDir();
  api(['workload'], { MIMALLOC_PROF_DUMP_AT_EXIT: join(off, 'x.%p.heap') });
  assert.deepEqual(listing(off), []);
});

// ---- profiler memory budget ----------------------------------------------------------------------------

test('MIMALLOC_PROF_MAX_BYTES: many distinct stacks drop samples and stay within the budget', () => {
  const run = (maxBytes?: string) =>
    kv(
      api(['stacks', '30', '100'], {
        MIMALLOC_PROF: '1',
        MIMALLOC_PROF_SAMPLE_INTERVAL: '1',
        ...(maxBytes !== undefined ? { MIMALLOC_PROF_MAX_BYTES: maxBytes } : {}),
      }),
    );
  // positive control: without a budget, 3000 distinct (stack, size) pairs, nothing dropped
  const free = run();
  assert.equal(free.num('dropped_samples'), 0);
  assert.equal(free.num('live_samples'), 3000);
  assert.equal(free.num('unique_stacks'), 3000);
  for (const [value, bytes] of [['64k', 64 * 1024], ['256k', 256 * 1024]] as const) {
    assert.ok(free.num('profiler_bytes') > bytes, 'the unlimited run needs more than the budget');
    const tight = run(value);
    assert.ok(tight.num('dropped_samples') > 0, `${value}: dropped_samples`);
    assert.ok(tight.num('profiler_bytes') <= bytes, `${value}: profiler_bytes=${tight.num('profiler_bytes')}`);
    // every sample is either kept or counted as dropped
    assert.equal(tight.num('live_samples') + tight.num('dropped_samples'), 3000, value);
    assert.equal(tight.num('running'), 1);
  }
  assert.ok(run('256k').num('live_samples') > 0, 'a 256 KiB budget keeps some samples');
});

test(
  'a profile can still be dumped (explicitly and at exit) once the memory budget is exhausted',
  () => {
    const dir = tempDir();
    const env = { MIMALLOC_PROF: '1', MIMALLOC_PROF_SAMPLE_INTERVAL: '1', MIMALLOC_PROF_MAX_BYTES: '256k' };
    const r = kv(api(['stacks', '30', '100', join(dir, 'now.heap')], env));
    assert.ok(r.num('dropped_samples') > 0, 'the budget was hit');
    assert.equal(r.num('dump_ok'), 1, `dump_errno=${r.str('dump_errno')}`);
    assert.ok(parseHeapText(readFileSync(join(dir, 'now.heap'), 'utf8')).header.inuseCount > 0);
    const atExit = api(['stacks', '30', '100'], { ...env, MIMALLOC_PROF_DUMP_AT_EXIT: join(dir, 'exit.%p.heap') });
    assert.equal(atExit.stderr, '');
    assert.ok(listing(dir).some((f) => /^exit\.\d+\.heap$/.test(f)), listing(dir).join(', '));
  },
);

// ---- exact counters ---------------------------------------------------------------------------------------

function assertExactCounters(r: KV): void {
  const usable = r.num('usable'); // sum of malloc_usable_size over the 1000 blocks of 4096 B
  const usable2 = r.num('usable2'); // ... after realloc to 8192 B
  assert.equal(r.num('enabled'), 1);
  assert.ok(usable >= 1000 * 4096 && usable2 >= 1000 * 8192);
  const d = (k: string, a: string, b: string): number => r.num(`${b}.${k}`) - r.num(`${a}.${k}`);
  for (const s of ['s0', 's1', 's2', 's3']) assert.equal(r.num(`${s}.memory_events`), 1);
  // malloc: live grows by exactly the usable bytes and 1000 objects
  assert.equal(d('exact_live_bytes', 's0', 's1'), usable);
  assert.equal(d('exact_live_objects', 's0', 's1'), 1000);
  // realloc: live bytes follow the new usable sizes, the object count does not change
  assert.equal(d('exact_live_bytes', 's0', 's2'), usable2);
  assert.equal(d('exact_live_objects', 's0', 's2'), 1000);
  // free: back to where it started
  assert.equal(r.num('s3.exact_live_bytes'), r.num('s0.exact_live_bytes'));
  assert.equal(r.num('s3.exact_live_objects'), r.num('s0.exact_live_objects'));
  // cumulative counters only grow: by the allocations, then by the reallocations, not by frees
  assert.equal(d('exact_accum_objects', 's0', 's1'), 1000);
  assert.equal(d('exact_accum_bytes', 's0', 's1'), usable);
  assert.equal(d('exact_accum_objects', 's1', 's2'), 1000);
  assert.equal(d('exact_accum_bytes', 's1', 's2'), usable2);
  assert.equal(d('exact_accum_objects', 's2', 's3'), 0);
  assert.equal(d('exact_accum_bytes', 's2', 's3'), 0);
}

test('memory events (MIMALLOC_MEMORY_EVENTS=1): exact live and cumulative counters', () => {
  assertExactCounters(kv(api(['events', 'env'], { MIMALLOC_MEMORY_EVENTS: '1' })));
});

test('memory events enabled at run time (mi_prof_memory_events_enable): exact counters', () => {
  assertExactCounters(kv(api(['events', 'runtime'])));
});

test('without memory events the exact counters stay 0 (control)', () => {
  const r = kv(api(['events', 'none'], { MIMALLOC_PROF: '1' }));
  assert.equal(r.num('enabled'), 0);
  for (const s of ['s0', 's1', 's2', 's3']) {
    assert.equal(r.num(`${s}.memory_events`), 0);
    assert.equal(r.num(`${s}.exact_live_bytes`), 0);
    assert.equal(r.num(`${s}.exact_live_objects`), 0);
    assert.equal(r.num(`${s}.exact_accum_objects`), 0);
  }
});

test(
  'memory events stay exact while profiling at interval 1 (every allocation sampled)',
  () => {
    assertExactCounters(
      kv(api(['events', 'env'], { MIMALLOC_MEMORY_EVENTS: '1', MIMALLOC_PROF: '1', MIMALLOC_PROF_SAMPLE_INTERVAL: '1' })),
    );
  },
);
