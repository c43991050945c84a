/** Gate 6, dumps under stress (docs/reliability.md): an unwritable target, RLIMIT_FSIZE hit
 * mid-write, several threads dumping at once, a dump racing fork. Every attempt ends as a
 * complete valid file or as false with errno set; never a partial or temporary file left, never
 * a crash. Files are read back with the package's own parsers (heap_v2 and proto), and in
 * proto every sample's thread label must name the thread whose tid it carries.
 * Control: the validator rejects a valid dump cut short: at 10, 50, 90 % and at each of its
 * last 48 bytes. */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { parseProfile } from '../../src/profile/parse.js';
import { cFixture, ending, fastTempDir, KV, productionDir, runUnder } from './util.js';

const bin = () => cFixture('dumps');

function dumps(args: string[]): KV {
  const r = runUnder(productionDir, bin(), args, {}, 60_000);
  assert.ok(!r.timedOut && r.status === 0, `dumps ${args[0]}: ${ending(r)}\n${r.stderr}`);
  return new KV(r.stdout);
}

/** Problems of one dump file: it must parse, be complete, and label threads truthfully. */
/** How /proc/self/maps ends on this machine (x86_64: the [vsyscall] page, else the stack). */
const lastMapsLine = ((): string => {
  const lines = readFileSync('/proc/self/maps', 'utf8').trimEnd().split('\n');
  const last = lines[lines.length - 1]!;
  return `${last.slice(last.lastIndexOf(' ') + 1)}\n`;
})();

function problems(file: string, names: Map<number, string> = new Map()): string[] {
  const data = readFileSync(file);
  const name = file.split('/').pop()!;
  const out: string[] = [];
  let p;
  try {
    p = parseProfile(data, name);
  } catch (e) {
    return [(e as Error).message];
  }
  if (name.endsWith('.heap')) {
    const text = data.toString('latin1');
    if (!text.startsWith('heap profile: ')) out.push(`${name}: no heap_v2 header`);
    if (!text.includes('\nMAPPED_LIBRARIES:\n') || !text.endsWith('\n')) out.push(`${name}: incomplete (no MAPPED_LIBRARIES trailer or last line cut)`);
    // a cut at a line end inside the maps copy leaves a well-formed file: the copy must end
    // as this machine's /proc/self/maps does
    else if (!text.endsWith(lastMapsLine)) out.push(`${name}: incomplete (the maps copy does not end with ${lastMapsLine.trim()})`);
  } else {
    const st = p.stringTable.strings;
    if (p.sampleType.length !== 4) out.push(`${name}: ${p.sampleType.length} sample types, not 4`);
    if (!st.some((s) => s.startsWith('mimalloc-pprof interval='))) out.push(`${name}: no comment line (cut short?)`);
    // the writer's last field is default_sample_type: a file cut at a field boundary lacks it
    if (st[Number(p.defaultSampleType)] !== 'inuse_space') out.push(`${name}: no default sample type (cut short)`);
    for (const s of p.sample) {
      const tid = Number(s.label.find((l) => st[Number(l.key)] === 'tid')?.num ?? -1);
      const thread = st[Number(s.label.find((l) => st[Number(l.key)] === 'thread')?.str ?? 0)];
      const expected = names.get(tid);
      if (expected !== undefined && thread !== expected) {
        out.push(`${name}: a sample of tid ${tid} (${expected}) is labelled thread=${thread}`);
        break;
      }
    }
  }
  return out;
}

function noTemporaries(dir: string): void {
  const left = readdirSync(dir, { recursive: true }).map(String).filter((f) => f.includes('.tmp.'));
  assert.deepEqual(left, [], 'temporary files were left behind');
}

test('an unwritable target: false with errno set, and nothing written', (t) => {
  const dir = fastTempDir('mpp-dumps-');
  const out = dumps(['unwritable', dir]);
  if (process.getuid?.() === 0) assert.equal(out.num('dropped_caps'), 1, 'as root, the DAC override capabilities must be dropped first');
  const cases = new Map(out.all('case').map((c) => [c.split(' ')[0]!, c] as const));
  const expect: Record<string, string> = {
    readonly_dir_text: 'ok=0 errno=EACCES',
    readonly_dir_proto: 'ok=0 errno=EACCES',
    file_as_dir: 'ok=0 errno=ENOTDIR',
    missing_dir: 'ok=0 errno=ENOENT',
    directory_target: 'ok=0 errno=EISDIR',
    empty_path: 'ok=0 errno=EINVAL',
    too_long: 'ok=0 errno=ENAMETOOLONG',
    writable_control: 'ok=1 errno=0', // the same process can write where it may
  };
  for (const [name, want] of Object.entries(expect)) assert.equal(cases.get(name), `${name} ${want}`);
  assert.match(cases.get('proc_target') ?? '', /^proc_target ok=0 errno=(ENOENT|EACCES|EROFS)$/);
  for (const c of cases.values()) t.diagnostic(`dump: ${c}`);
  assert.deepEqual(readdirSync(dir).sort(), ['ok.heap', 'plainfile', 'readonly']);
  assert.deepEqual(readdirSync(join(dir, 'readonly')), []);
  assert.deepEqual(problems(join(dir, 'ok.heap')), []);
});

test('RLIMIT_FSIZE below the profile: EFBIG, the previous profile intact, the process alive', (t) => {
  const dir = fastTempDir('mpp-dumps-');
  const out = dumps(['fsize', dir]);
  const cases = out.all('case');
  assert.ok(cases.filter((c) => /_limit_/.test(c)).length >= 10, cases.join('\n'));
  for (const c of cases) {
    if (/_limit_/.test(c)) assert.match(c, /ok=0 errno=EFBIG$/);
    else assert.match(c, /_after ok=1 errno=0$/);
  }
  assert.equal(out.num('heap_target_intact'), 1);
  assert.equal(out.num('pb_target_intact'), 1);
  t.diagnostic(`dump: ${cases.length} attempts: ${cases.join(', ')}; sizes ${out.all('format').join(', ')}`);
  noTemporaries(dir);
  for (const f of readdirSync(dir)) assert.deepEqual(problems(join(dir, f)), []);
});

test('several threads dumping at once (text and proto, own and shared targets): every file complete and truthful', (t) => {
  const dir = fastTempDir('mpp-dumps-');
  const out = dumps(['threads', dir, '3']);
  const names = new Map(out.all('tid').map((l) => [Number(l.split(' ')[0]), l.split(' name=')[1]!] as const));
  assert.equal(names.size, 6);
  assert.equal(out.num('dumps_failed'), 0);
  assert.ok(out.num('dumps_ok') >= 20, `only ${out.num('dumps_ok')} dumps`);
  noTemporaries(dir);
  const files = readdirSync(dir);
  const found = files.flatMap((f) => problems(join(dir, f), names));
  t.diagnostic(`dump: ${out.num('dumps_ok')} concurrent dumps by 4 threads, ${files.length} files checked, ${found.length} problems`);
  assert.deepEqual(found, []);
});

test('a dump racing fork: the parent and every child leave complete files', (t) => {
  const dir = fastTempDir('mpp-dumps-');
  const out = dumps(['fork', dir, '3']);
  assert.equal(out.num('children_hung'), 0, 'a child could not finish its dump (a lock inherited held)');
  assert.ok(out.num('forks') >= 10, `only ${out.num('forks')} forks`);
  assert.equal(out.num('children_failed'), 0);
  assert.equal(out.num('dumps_failed'), 0);
  noTemporaries(dir);
  const files = readdirSync(dir);
  assert.equal(files.filter((f) => f.startsWith('child.')).length, out.num('forks'));
  const found = files.flatMap((f) => problems(join(dir, f)));
  t.diagnostic(`dump: ${out.num('forks')} forks during ${out.num('dumps_ok')} dumps, ${files.length} files checked, ${found.length} problems`);
  assert.deepEqual(found, []);
});

test('positive control: the validator rejects a valid dump cut short', (t) => {
  const dir = fastTempDir('mpp-dumps-');
  dumps(['threads', dir, '0.5']);
  const caught: string[] = [];
  for (const f of ['d0.0.heap', 'd0.1.pb']) {
    const whole = readFileSync(join(dir, f));
    assert.deepEqual(problems(join(dir, f)), []);
    // cut at a few fractions, and at each of the last 48 bytes (field and line boundaries too)
    const lengths = [0.1, 0.5, 0.9].map((frac) => Math.floor(whole.length * frac));
    for (let k = 1; k <= 48; k++) lengths.push(whole.length - k);
    for (const len of lengths) {
      const cut = join(dir, `cut-${len}-${f}`);
      writeFileSync(cut, whole.subarray(0, len));
      const p = problems(cut);
      assert.ok(p.length > 0, `${f} cut to ${len} of ${whole.length} bytes passed the validator`);
      caught.push(p[0]!);
    }
  }
  t.diagnostic(`control caught: ${caught.length} cut files, e.g. ${caught[0]}; ${caught[caught.length - 1]}`);
});
