/**
 * No frame of a Node profile stays without a name: a realistic service (HTTP, Buffers, zlib
 * on the thread pool and synchronously, a worker thread), driven over HTTP by this test,
 * profiled under `run` and through the in-process API. Frames without a name are those
 * `go tool pprof` shows as `<unknown>` or an address: no function and no file. Most of this
 * service's memory is allocated beneath V8's API-call and construct builtins, which run from
 * V8's copy of its embedded builtins, outside every recorded mapping
 * (src/symbolize/code-copies.ts): the test also checks that such frames are there and named.
 * Control: MIMALLOC_PPROF_TEST_NO_CODE_COPIES=1 leaves them unnamed, and the bound fails.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import http from 'node:http';
import { join } from 'node:path';
import { test } from 'node:test';
import { gunzipSync } from 'node:zlib';

import { Location, Profile, Sample } from '../../src/profile/pprof.js';

import { libraryPath } from '../../src/preload/library.js';
import { readElf } from '../../src/symbolize/elf.js';
import { CodeCopyIndex, findCodeCopies, HEAD_BYTES } from '../../src/symbolize/code-copies.js';
import { symbolize } from '../../src/symbolize/index.js';
import { root, tempDir } from '../helpers.js';

const fixture = join(root, 'test', 'symbolize', 'fixtures', 'http-service.mjs');
/** The sampling interval: the bound below is 1 % of the in-use bytes, and under `run` the
 * service keeps ~70 MB, ~140 samples at the default 512 KiB: 1 % was one or two samples, and
 * three stray ones decided the test once in 22 CI runs (2.1 %). At 64 KiB they are ~1 100, so
 * the bound fails on a kind of frame left unnamed, not on a few samples of it. */
const INTERVAL = 65536;
const cli = join(root, 'dist', 'src', 'cli', 'bin.js');

function request(port: number, method: string, path: string, body?: Buffer): Promise<void> {
  return new Promise((resolve, reject) => {
    const r = http.request({ host: '127.0.0.1', port, method, path, agent: false }, (res) => {
      res.resume();
      res.on('end', resolve);
    });
    r.on('error', reject);
    r.end(body);
  });
}

/** Starts the service (`run` or `api`), drives it, and returns the profile's path. */
async function profileService(mode: 'run' | 'api', control: boolean): Promise<string> {
  const dir = tempDir('mpp-unnamed-');
  const out = join(dir, 'service.pb.gz');
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('MIMALLOC_') && k !== 'NODE_OPTIONS' && k !== 'LD_PRELOAD'));
  const env = { ...clean, ...(control ? { MIMALLOC_PPROF_TEST_NO_CODE_COPIES: '1' } : {}) };
  const child =
    mode === 'run'
      ? spawn(process.execPath, [cli, 'run', '--no-js-heap', '--interval', String(INTERVAL), '--out', out, '--', process.execPath, fixture, 'run'], { cwd: dir, env, stdio: ['ignore', 'pipe', 'pipe'] })
      : spawn(process.execPath, ['--perf-basic-prof', '--interpreted-frames-native-stack', fixture, 'api', out], {
          cwd: dir,
          env: { ...env, LD_PRELOAD: libraryPath(), MIMALLOC_PROF_BT_MAX: '64', MIMALLOC_PROF_SAMPLE_INTERVAL: String(INTERVAL) },
          stdio: ['ignore', 'pipe', 'pipe'],
        });
  let stdout = '';
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += String(d)));
  const ended = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const port = await new Promise<number>((resolve, reject) => {
    child.stdout.on('data', (d) => {
      stdout += String(d);
      const m = /port (\d+)/.exec(stdout);
      if (m) resolve(Number(m[1]));
    });
    child.on('exit', () => reject(new Error(`the service ended before listening:\n${stdout}\n${stderr}`)));
  });
  // 1200 bodies of 16–64 KiB, 8 at a time
  for (let i = 0; i < 150; i++) {
    await Promise.all(Array.from({ length: 8 }, (_, j) => request(port, 'POST', '/', Buffer.alloc(16384 * (1 + ((i + j) % 4)), `body ${i} ${j} `))));
  }
  if (mode === 'api') await request(port, 'GET', '/profile');
  await request(port, 'GET', '/exit');
  const status = await ended;
  if (mode === 'api' && child.pid) rmSync(`/tmp/perf-${child.pid}.map`, { force: true });
  assert.equal(status, 0, `${mode}: status ${status}\n${stdout}\n${stderr}`);
  return out;
}

interface Measure {
  /** per sample type: the share of the total under a frame without a name */
  unnamed: Record<string, number>;
  /** the share of in-use memory under a Builtins_* frame named in V8's copy (not the binary's text) */
  inCopies: number;
  total: number;
}

function measure(path: string): Measure {
  const buf = readFileSync(path);
  const p = Profile.decode(buf[0] === 0x1f ? gunzipSync(buf) : buf);
  const str = (i: number | bigint) => p.stringTable.strings[Number(i)] ?? '';
  const mappings = new Map(p.mapping.map((m) => [Number(m.id), m]));
  const fn = new Map(p.function.map((f) => [Number(f.id), f]));
  // the main program's segments share one load bias; V8's copy maps its file elsewhere
  const bias = (m: (typeof p.mapping)[number]) => Number(m.memoryStart) - Number(m.fileOffset);
  const mainBias = bias(p.mapping[0]!);
  const unnamedLoc = new Set<number>();
  const copyLoc = new Set<number>();
  for (const l of p.location) {
    const m = mappings.get(Number(l.mappingId));
    const file = m ? str(m.filename) : '';
    if (l.line.length === 0 && !file.startsWith('/')) unnamedLoc.add(Number(l.id));
    const name = l.line.length > 0 ? str(fn.get(Number(l.line[0]!.functionId))?.name ?? 0) : '';
    if (name.startsWith('Builtins_') && m && bias(m) !== mainBias) copyLoc.add(Number(l.id));
  }
  const types = p.sampleType.map((t) => str(t.type));
  const unnamed: Record<string, number> = {};
  let inCopies = 0;
  let total = 0;
  types.forEach((type, k) => {
    let all = 0;
    let without = 0;
    for (const s of p.sample) {
      const v = Number(s.value[k]);
      all += v;
      if (s.locationId.some((id) => unnamedLoc.has(Number(id)))) without += v;
      if (type === 'inuse_space' && s.locationId.some((id) => copyLoc.has(Number(id)))) inCopies += v;
    }
    if (type === 'inuse_space') total = all;
    unnamed[type] = all > 0 ? without / all : 0;
  });
  return { unnamed, inCopies: total > 0 ? inCopies / total : 0, total };
}

const LIMIT = 0.01;

for (const mode of ['run', 'api'] as const) {
  test(`${mode}: frames without a name carry at most 1 % of an HTTP + Buffer + zlib service's profile`, async (t) => {
    const path = await profileService(mode, false);
    const m = measure(path);
    t.diagnostic(`${mode}: ${JSON.stringify(m)}`);
    rmSync(join(path, '..'), { recursive: true, force: true });
    assert.ok(m.total > 20 * 1024 * 1024, `the service kept ${m.total} bytes`);
    // the case this is about: most memory lies beneath V8's builtins copied out of the binary
    assert.ok(m.inCopies > 0.3, `only ${(100 * m.inCopies).toFixed(1)} % beneath Builtins_* frames of V8's copy`);
    for (const [type, share] of Object.entries(m.unnamed)) {
      assert.ok(share <= LIMIT, `${type}: ${(100 * share).toFixed(2)} % beneath frames without a name`);
    }
  });

  test(`${mode} control: with the builtins' copy left unnamed, the bound fails`, async (t) => {
    const path = await profileService(mode, true);
    const m = measure(path);
    t.diagnostic(`${mode} control: ${JSON.stringify(m)}`);
    rmSync(join(path, '..'), { recursive: true, force: true });
    assert.ok(m.unnamed.inuse_space! > LIMIT, `inuse_space: only ${(100 * m.unnamed.inuse_space!).toFixed(2)} % unnamed without the naming`);
  });
}

/** The embedded blob's place and first bytes in this node binary, as a test reads them. */
function blobOfNode() {
  const elf = readElf(process.execPath);
  const code = elf.symbolByName('v8_Default_embedded_blob_code_')!;
  const size = elf.readAtVaddr(elf.symbolByName('v8_Default_embedded_blob_code_size_')!.value, 4)!.readUInt32LE(0);
  const seg = elf.loadSegments.find((s) => code.value >= s.vaddr && code.value < s.vaddr + s.filesz)!;
  const api = ['Builtins_CallApiCallback', 'Builtins_CallApiCallbackGeneric'].map((n) => elf.symbolByName(n)).find(Boolean)!;
  return { elf, vaddr: code.value, size, fileOffset: seg.offset + code.value - seg.vaddr, head: elf.readAtVaddr(code.value, HEAD_BYTES)!, api };
}

test('an anonymous copy of the blob (RemapPages failed: V8 copied the bytes) is found by its first bytes and named', () => {
  const b = blobOfNode();
  const text = b.elf.loadSegments.find((s) => s.flags & 1 && b.vaddr >= s.vaddr && b.vaddr < s.vaddr + s.memsz)!;
  const at = 0x7f0000200000;
  const maps = [
    `${text.vaddr.toString(16)}-${(text.vaddr + text.memsz).toString(16)} r-xp ${text.offset.toString(16)} fe:00 1 ${process.execPath}`,
    // JIT code, then the copy in the same anonymous mapping, a few pages in
    `7f0000100000-${(at + b.size + 0x3000).toString(16)} r-xp 00000000 00:00 0 `,
  ].join('\n');
  const other = Buffer.alloc(HEAD_BYTES, 0xcc);
  const copies = findCodeCopies(maps, (a) => (a === at ? b.head : other));
  const copy = copies.find((c) => c.start === at);
  assert.deepEqual(copy, { start: at, limit: at + b.size, file: process.execPath, fileOffset: b.fileOffset });
  // without memory to compare, nothing is guessed
  assert.equal(findCodeCopies(maps).some((c) => c.start === at), false);
  // a second file mapping over the blob: the copy is file-backed, no search
  const remapped = `${maps}\n7f0000500000-${(0x7f0000500000 + b.size).toString(16)} r-xp ${b.fileOffset.toString(16)} fe:00 1 ${process.execPath}`;
  let asked = 0;
  findCodeCopies(remapped, () => (asked++, other));
  assert.equal(asked, 0);
  // a frame 0x86 into the API-call builtin of that copy, in a profile without its mapping
  const pc = at + (b.api.value - b.vaddr) + 0x85;
  const p = new Profile({ stringTable: undefined });
  p.stringTable.dedup('');
  p.location.push(new Location({ id: 1, address: pc, mappingId: 0 }));
  p.sample.push(new Sample({ locationId: [1], value: [1] }));
  const { profile, counts } = symbolize(p, { codeCopies: copies });
  assert.equal(counts.native, 1);
  const f = profile.function.find((fn) => fn.id === profile.location[0]!.line[0]!.functionId)!;
  assert.match(profile.stringTable.strings[Number(f.name)]!, /^Builtins_CallApiCallback/);
  const m = profile.mapping.find((x) => x.id === profile.location[0]!.mappingId)!;
  assert.equal(Number(m.memoryStart), at);
  assert.equal(profile.stringTable.strings[Number(m.filename)], process.execPath);
  // overlapping copies: the one listed last wins
  const idx = new CodeCopyIndex([copies.find((c) => c.start === at)!, { start: at, limit: at + 0x1000, file: '/x', fileOffset: 0 }]);
  assert.equal(idx.lookup(at + 5)!.file, '/x');
  assert.equal(idx.lookup(at + 0x2000)!.file, process.execPath);
});
