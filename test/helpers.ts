/** Shared test support: building C fixtures, running under the preload, reading profiles
 * with the real google/pprof (`go tool pprof`). */
import { spawn, spawnSync, type SpawnSyncReturns } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { libraryPath, packageRoot } from '../src/preload/library.js';
import { execWrapper, libDir, targetCC, targetCXX, testBuildRoot } from './mimalloc.js';

export const root = packageRoot;

/**
 * The Node the tests run on and start: the machine's own, or in a pass of the Node matrix
 * (scripts/run-tests.mjs, scripts/nodes.mjs) the pinned binary in build/node/<major> named by
 * MIMALLOC_PPROF_TEST_NODE. That pass runs the test files on it and puts its folder first on
 * PATH, so `process.execPath` and a plain `node` are both this binary
 * (test/package/matrix.test.ts checks it).
 */
export const testNode = process.env.MIMALLOC_PPROF_TEST_NODE || process.execPath;
/** The Node that runs with the library under test preloaded: testNode, or in the arm64 pass
 * the official arm64 Node (scripts/cross.mjs ensureArm64Node), which targetArgv starts under
 * the emulator. */
export const targetNode = process.env.MIMALLOC_PPROF_TEST_ARM64_NODE || testNode;
/** The major version of the Node running this test file. */
export const nodeMajor = Number(process.versions.node.split('.')[0]);
export const fixturesDir = join(root, 'test', 'native', 'fixtures');
export const buildDir = join(testBuildRoot, 'test');

export function tempDir(prefix = 'mpp-test-'): string {
  return removedAtExit(mkdtempSync(join(tmpdir(), prefix)));
}

const madeDirs: string[] = [];
/** dir, removed with everything in it when this test file's process exits (each test file runs
 * in a process of its own), so that test runs leave nothing in /tmp or /dev/shm; with
 * MPP_KEEP_TEMP=1 it stays, to look at after a failure. */
export function removedAtExit(dir: string): string {
  if (process.env.MPP_KEEP_TEMP === '1') return dir;
  if (madeDirs.length === 0)
    process.on('exit', () => {
      for (const d of madeDirs) rmSync(d, { recursive: true, force: true });
    });
  madeDirs.push(dir);
  return dir;
}

/**
 * Compiles test/native/fixtures/<name>.c or .cc into build/test/<name><variant>, unless the
 * binary is newer than its source. Fixtures are PIE with DWARF so `go tool pprof` names them.
 */
export function fixture(name: string, opts: { flags?: string[]; libs?: string[]; variant?: string } = {}): string {
  const c = join(fixturesDir, `${name}.c`);
  const cc = join(fixturesDir, `${name}.cc`);
  const src = existsSync(c) ? c : cc;
  const out = join(buildDir, `${name}${opts.variant ?? ''}`);
  mkdirSync(buildDir, { recursive: true });
  if (existsSync(out) && statSync(out).mtimeMs >= statSync(src).mtimeMs) return out;
  const compiler = src === c ? targetCC : targetCXX;
  const lang = src === c ? ['-std=gnu11'] : ['-std=c++17'];
  const args = [
    ...lang,
    '-g',
    '-O1',
    '-fno-omit-frame-pointer',
    ...(opts.flags ?? []),
    '-I',
    join(root, 'native', 'include'),
    src,
    '-o',
    out,
    // fixtures that call the public API link the library (as-needed: the others do not)
    '-Wl,--as-needed',
    `-L${libDir}`,
    `-Wl,-rpath,${libDir}`,
    '-lmimalloc-pprof',
    ...(opts.libs ?? []),
    '-lm',
    '-lpthread',
  ];
  const r = spawnSync(compiler, args, { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`building fixture ${name} failed:\n${r.stderr}`);
  return out;
}

export interface Run {
  status: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

function asRun(r: SpawnSyncReturns<string>): Run {
  if (r.error) throw r.error;
  return { status: r.status, signal: r.signal, stdout: r.stdout, stderr: r.stderr };
}

/** A program built for the target, as started on this machine: through the cross pass's
 * emulator (test/mimalloc.ts execWrapper), as is where there is none. This Node stays as is. */
export function targetArgv(cmd: string, args: string[]): [string, string[]] {
  if (execWrapper.length === 0 || cmd === process.execPath) return [cmd, args];
  // `setarch ARCH -R program …` (no address randomisation): the emulator inherits the persona
  if (cmd === 'setarch' && args.length >= 3) return [cmd, [args[0]!, args[1]!, ...execWrapper, ...args.slice(2)]];
  return [execWrapper[0]!, [...execWrapper.slice(1), cmd, ...args]];
}

/** Runs a program built for the target (through the cross pass's emulator), not preloaded
 * unless `env` says so: the controls on the target's own C library. */
export function runTarget(cmd: string, args: string[], env: Record<string, string> = {}, timeoutMs = 120_000): Run {
  return asRun(spawnSync(...targetArgv(cmd, args), { encoding: 'utf8', env: { ...process.env, ...env }, timeout: timeoutMs, maxBuffer: 64 << 20 }));
}

/** Runs a command with the preload library and the given MIMALLOC_* variables. */
export function runPreloaded(cmd: string, args: string[], env: Record<string, string> = {}, timeoutMs = 120_000): Run {
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('MIMALLOC_')));
  return asRun(
    spawnSync(...targetArgv(cmd, args), {
      encoding: 'utf8',
      env: { ...clean, LD_PRELOAD: libraryPath(), ...env },
      timeout: timeoutMs,
      maxBuffer: 64 << 20,
    }),
  );
}

export function run(cmd: string, args: string[], env: Record<string, string> = {}, timeoutMs = 120_000): Run {
  return asRun(spawnSync(cmd, args, { encoding: 'utf8', env: { ...process.env, ...env }, timeout: timeoutMs, maxBuffer: 64 << 20 }));
}

/** One sample of `go tool pprof -raw`: values in sample-type order, stack leaf first. */
export interface RawSample {
  values: number[];
  functions: string[][]; // per location, inlined names innermost first
  addresses: number[]; // per location, as listed (call instruction for proto)
  labels: string;
}

export interface RawMapping {
  id: number;
  start: number;
  limit: number;
  offset: number;
  file: string;
  buildId: string;
}

export interface RawProfile {
  types: string[];
  defaultType: string;
  period: number;
  comments: string[];
  samples: RawSample[];
  mappings: RawMapping[];
}

/** Parses the deterministic `-raw` listing of the real google/pprof. */
export function parsePprofRaw(text: string): RawProfile {
  const lines = text.split('\n');
  const types: string[] = [];
  let defaultType = '';
  let period = 0;
  const comments: string[] = [];
  const pending: { values: number[]; locs: number[]; labels: string }[] = [];
  const locations = new Map<number, string[]>();
  const addresses = new Map<number, number>();
  const mappings: RawMapping[] = [];
  let section = '';
  let lastLoc = -1;
  for (const line of lines) {
    if (line.startsWith('Comment: ')) comments.push(line.slice(9));
    else if (line.startsWith('Period: ')) period = Number(line.slice(8));
    else if (line === 'Samples:') section = 'samples';
    else if (line === 'Locations') section = 'locations';
    else if (line === 'Mappings') section = 'mappings';
    else if (section === 'samples' && types.length === 0 && /[a-z_]+\/[a-z]+/.test(line)) {
      for (const t of line.trim().split(/\s+/)) {
        const name = t.replace(/\[dflt\]$/, '');
        types.push(name.split('/')[0] ?? name);
        if (t.endsWith('[dflt]')) defaultType = name.split('/')[0] ?? name;
      }
    } else if (section === 'samples') {
      const m = /^\s*(-?\d+(?:\s+-?\d+)*):((?:\s+\d+)*)\s*$/.exec(line);
      if (m) {
        pending.push({
          values: m[1]!.trim().split(/\s+/).map(Number),
          locs: (m[2] ?? '').trim().split(/\s+/).filter(Boolean).map(Number),
          labels: '',
        });
      } else if (line.trim() !== '' && pending.length > 0) {
        pending[pending.length - 1]!.labels += line.trim();
      }
    } else if (section === 'locations') {
      const m = /^\s*(\d+): (0x[0-9a-f]+)(?: M=\d+)?\s*(.*)$/.exec(line);
      if (m) {
        lastLoc = Number(m[1]);
        addresses.set(lastLoc, Number(m[2]));
        const fn = (m[3] ?? '').trim().split(/\s+/)[0] ?? '';
        locations.set(lastLoc, fn ? [fn] : []);
      } else if (line.trim() !== '' && lastLoc >= 0) {
        const fn = line.trim().split(/\s+/)[0];
        if (fn) locations.get(lastLoc)?.push(fn);
      }
    } else if (section === 'mappings' && line.trim() !== '') {
      const m = /^(\d+): (0x[0-9a-f]+)\/(0x[0-9a-f]+)\/(0x[0-9a-f]+)\s+(\S*)\s*([0-9a-f]*)/.exec(line.trim());
      if (m) {
        mappings.push({ id: +m[1]!, start: Number(m[2]), limit: Number(m[3]), offset: Number(m[4]), file: m[5]!, buildId: m[6]! });
      }
    }
  }
  return {
    types,
    defaultType: defaultType || (types[types.length - 1] ?? ''),
    period,
    comments,
    mappings,
    samples: pending.map((p) => ({
      values: p.values,
      labels: p.labels,
      functions: p.locs.map((id) => locations.get(id) ?? []),
      addresses: p.locs.map((id) => addresses.get(id) ?? 0),
    })),
  };
}

/** `go tool pprof -raw [binary] file`, parsed. Throws with pprof's stderr on failure. */
export function pprofRaw(file: string, binary?: string, extra: string[] = []): RawProfile {
  const args = ['tool', 'pprof', '-raw', ...extra, ...(binary ? [binary] : []), file];
  const r = run('go', args, { PPROF_TMPDIR: tempDir('mpp-pprof-') });
  if (r.status !== 0) throw new Error(`go tool pprof failed (${r.status}): ${r.stderr}`);
  return parsePprofRaw(r.stdout);
}

export function sampleValue(profile: RawProfile, s: RawSample, type: string): number {
  const i = profile.types.indexOf(type);
  if (i < 0) throw new Error(`no sample type ${type} in ${profile.types.join(',')}`);
  return s.values[i]!;
}

export function stackHas(s: RawSample, fn: string): boolean {
  return s.functions.some((names) => names.includes(fn));
}

/** A heap_v2 text profile's header and rows (raw sampled counts). */
export interface HeapText {
  header: { inuseCount: number; inuseBytes: number; allocCount: number; allocBytes: number; interval: number };
  rows: { inuseCount: number; inuseBytes: number; allocCount: number; allocBytes: number; stack: string[] }[];
  comments: Map<string, string>;
  maps: string[];
}

export function parseHeapText(text: string): HeapText {
  const lines = text.split('\n');
  const h = /^heap profile:\s*(\d+):\s*(\d+)\s*\[\s*(\d+):\s*(\d+)\s*\]\s*@\s*heap_v2\/(\d+)$/.exec(lines[0] ?? '');
  if (!h) throw new Error(`bad heap_v2 header: ${lines[0]}`);
  const out: HeapText = {
    header: { inuseCount: +h[1]!, inuseBytes: +h[2]!, allocCount: +h[3]!, allocBytes: +h[4]!, interval: +h[5]! },
    rows: [],
    comments: new Map(),
    maps: [],
  };
  let inMaps = false;
  for (const line of lines.slice(1)) {
    if (inMaps) {
      if (line !== '') out.maps.push(line);
      continue;
    }
    if (line === 'MAPPED_LIBRARIES:') {
      inMaps = true;
      continue;
    }
    const c = /^# ([a-z_]+): (-?\d+)$/.exec(line);
    if (c) {
      out.comments.set(c[1]!, c[2]!);
      continue;
    }
    const r = /^\s*(\d+):\s*(\d+)\s*\[\s*(\d+):\s*(\d+)\s*\]\s*@((?: 0x[0-9a-f]+)+)$/.exec(line);
    if (r) {
      out.rows.push({
        inuseCount: +r[1]!,
        inuseBytes: +r[2]!,
        allocCount: +r[3]!,
        allocBytes: +r[4]!,
        stack: r[5]!.trim().split(' '),
      });
    } else if (line.trim() !== '' && !line.startsWith('#')) {
      throw new Error(`unexpected heap_v2 line: ${line}`);
    }
  }
  return out;
}

/** Horvitz-Thompson weight of one sample of `size` bytes at mean interval R. */
export function weight(size: number, interval: number): number {
  return 1 / -Math.expm1(-size / interval);
}

/**
 * Names the frames of `binary` in a profile from its ELF symbol table (binutils nm), for
 * code that `go tool pprof` cannot symbolise (its object reader does not resolve C++).
 * Returns, per sample, the demangled function names of frames inside the binary.
 */
export function symbolizeWithNm(profile: RawProfile, binary: string): string[][] {
  const nm = run('nm', ['-C', '-S', '--defined-only', binary]);
  if (nm.status !== 0) throw new Error(`nm failed: ${nm.stderr}`);
  const syms = nm.stdout
    .split('\n')
    .map((l) => /^([0-9a-f]+) ([0-9a-f]+) [tTwW] (.+)$/.exec(l))
    .filter((m): m is RegExpExecArray => m !== null)
    .map((m) => ({ lo: parseInt(m[1]!, 16), hi: parseInt(m[1]!, 16) + parseInt(m[2]!, 16), name: m[3]!.replace(/\(.*$/, '') }));
  const mapping = profile.mappings.find((m) => m.file === binary);
  if (!mapping) throw new Error(`no mapping for ${binary}`);
  // PIE text: file offset equals virtual address for the fixtures (checked by readelf in tests).
  return profile.samples.map((s) =>
    s.addresses
      .filter((a) => a >= mapping.start && a < mapping.limit)
      .map((a) => a - mapping.start + mapping.offset)
      .map((v) => syms.find((f) => v >= f.lo && v < f.hi)?.name ?? '?'),
  );
}

/** Starts `run` (the CLI at `cli`) on a program that prints "ready", and SIGTERMs `run` then: its exit code and stderr. */
export async function terminateRunWhenReady(cli: string, out: string, command: string[]): Promise<{ code: number | null; stderr: string }> {
  const child = spawn(process.execPath, [cli, 'run', '--interval', '64k', '--out', out, '--', ...command], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  await new Promise<void>((ready) => child.stdout.on('data', (d) => String(d).includes('ready') && ready()));
  child.kill('SIGTERM');
  const code = await new Promise<number | null>((done) => child.on('exit', (c) => done(c)));
  return { code, stderr };
}
