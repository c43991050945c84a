/** Support for the reliability gates (docs/reliability.md): the library's test builds, the
 * gates' C fixtures built against a chosen build, runs under a chosen preload, and the
 * `key=value` output of the fixtures. */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { removedAtExit, root, targetArgv, type Run } from '../helpers.js';
import { libDir, makeVars, mimallocLinkFlags, targetCC, testBuildRoot } from '../mimalloc.js';

export const productionDir = libDir;
export const testHooksDir = join(testBuildRoot, 'test-hooks');
export const fixturesDir = join(root, 'test', 'reliability', 'fixtures');
const outDir = join(testBuildRoot, 'test', 'reliability');

/** `make -C native TARGET BUILD=dir VARS…`, quiet; throws with make's output on failure. */
export function make(target: string, buildDir: string, vars: string[] = []): void {
  const r = spawnSync('make', ['-s', '-j2', '-C', join(root, 'native'), target, `BUILD=${buildDir}`, ...makeVars, ...vars], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`make ${target} failed:\n${r.stdout}${r.stderr}`);
}

/** The library built with -DMP_TEST_HOOKS (build/test-hooks); returns its directory. */
export function buildTestHooks(): string {
  make('test-hooks', testHooksDir);
  return testHooksDir;
}

/** test/reliability/fixtures/NAME.c compiled and linked against the library in libDir. */
export function cFixture(name: string, libDir = productionDir): string {
  const src = join(fixturesDir, `${name}.c`);
  const lib = join(libDir, 'libmimalloc-pprof.so');
  const out = join(outDir, libDir === productionDir ? name : `${name}-${libDir.split('/').pop()}`);
  mkdirSync(outDir, { recursive: true });
  if (existsSync(out) && statSync(out).mtimeMs >= Math.max(statSync(src).mtimeMs, statSync(lib).mtimeMs)) return out;
  const r = spawnSync(
    targetCC,
    ['-std=gnu11', '-g', '-O1', '-fno-omit-frame-pointer', '-Wall', '-Werror', '-I', join(root, 'native', 'include'), src, '-o', out,
      `-L${libDir}`, `-Wl,-rpath,${libDir}`, '-lmimalloc-pprof', '-lpthread', '-ldl'],
    { encoding: 'utf8' },
  );
  if (r.status !== 0) throw new Error(`building ${name} failed:\n${r.stderr}`);
  return out;
}

/** test/reliability/fixtures/NAME.c compiled for the target without this library (a program
 * to preload it into, or with `shared`, a library of its own), with `flags` added. */
export function plainFixture(name: string, options: { shared?: boolean; flags?: string[] } = {}): string {
  const src = join(fixturesDir, `${name}.c`);
  const out = join(outDir, options.shared ? `lib${name}.so` : `${name}-plain`);
  mkdirSync(outDir, { recursive: true });
  if (existsSync(out) && statSync(out).mtimeMs >= statSync(src).mtimeMs) return out;
  const shared = options.shared ? ['-shared', '-fPIC'] : [];
  const r = spawnSync(targetCC, ['-std=gnu11', '-O1', '-Wall', '-Werror', ...shared, src, '-o', out, '-lpthread', ...(options.flags ?? [])], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`building ${name} failed:\n${r.stderr}`);
  return out;
}

export interface GateRun extends Run {
  timedOut: boolean;
}

/** Runs cmd with LD_PRELOAD=libDir's library, MIMALLOC_* and MP_TEST_* cleared, then `env`. */
export function runUnder(libDir: string, cmd: string, args: string[], env: Record<string, string> = {}, timeoutMs = 120_000): GateRun {
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('MIMALLOC_') && !k.startsWith('MP_TEST_')));
  const r = spawnSync(...targetArgv(cmd, args), {
    encoding: 'utf8',
    env: { ...clean, LD_PRELOAD: join(libDir, 'libmimalloc-pprof.so'), ...env },
    timeout: timeoutMs,
    maxBuffer: 64 << 20,
  });
  const timedOut = (r.error as NodeJS.ErrnoException | undefined)?.code === 'ETIMEDOUT';
  if (r.error && !timedOut) throw r.error;
  return { status: r.status, signal: r.signal, stdout: r.stdout ?? '', stderr: r.stderr ?? '', timedOut };
}

/** `key=value` lines (the last value of a repeated key wins; see `all` for repeats). */
export class KV {
  readonly map = new Map<string, string>();
  constructor(readonly text: string) {
    for (const line of text.split('\n')) {
      const i = line.indexOf('=');
      if (i > 0) this.map.set(line.slice(0, i), line.slice(i + 1));
    }
  }
  has(key: string): boolean {
    return this.map.has(key);
  }
  str(key: string): string {
    const v = this.map.get(key);
    if (v === undefined) throw new Error(`no ${key}= in output:\n${this.text}`);
    return v;
  }
  num(key: string): number {
    const v = Number(this.str(key));
    if (!Number.isFinite(v)) throw new Error(`${key}=${this.str(key)} is not a number`);
    return v;
  }
  all(key: string): string[] {
    return this.text
      .split('\n')
      .filter((l) => l.startsWith(`${key}=`))
      .map((l) => l.slice(key.length + 1));
  }
}

/** How a run ended, in words: "exit 0", "exit 3", "killed by SIGSEGV", "timed out". */
export function ending(r: GateRun): string {
  if (r.timedOut) return 'timed out';
  return r.signal ? `killed by ${r.signal}` : `exit ${r.status}`;
}

export const MiB = 1 << 20;
export const mib = (bytes: number): string => `${(bytes / MiB).toFixed(2)} MiB`;

/** Whether the file holds the bytes of `needle` (a test-hooks build carries its MP_TEST_ names). */
export function fileContains(file: string, needle: string): boolean {
  return readFileSync(file).includes(Buffer.from(needle));
}

/** A new directory on tmpfs when there is one (dumps fsync: a disk only slows the gates). */
export function fastTempDir(prefix = 'mpp-gate-'): string {
  let base = tmpdir();
  try {
    if (statSync('/dev/shm').isDirectory()) base = '/dev/shm';
  } catch {
    /* no /dev/shm: the temp directory */
  }
  return removedAtExit(mkdtempSync(join(base, prefix)));
}

// ---- sanitizer builds ------------------------------------------------------------------------

export type SanitizerKind = 'sanitize' | 'fuzz';

const SAN_FLAGS: Record<SanitizerKind, string[]> = {
  sanitize: ['-fsanitize=address,undefined'],
  fuzz: ['-fsanitize=fuzzer-no-link,address,undefined'],
};

/** The library's sources built by clang with sanitizers (native/Makefile `sanitize`) into
 * build/<kind>/: the archive, and the map of the libc and C++ names renamed mp_san_*. */
export function sanitizerBuild(kind: SanitizerKind): { dir: string; archive: string; syms: string } {
  const dir = join(testBuildRoot, kind);
  make('sanitize', dir, [`SAN_FLAGS=${SAN_FLAGS[kind].join(' ')}`]);
  return { dir, archive: join(dir, 'libmimalloc-pprof-san.a'), syms: join(dir, 'interposed.syms') };
}

function run(cmd: string, args: string[]): void {
  const r = spawnSync(cmd, args, { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')} failed:\n${r.stderr}`);
}

/**
 * A test program built against a sanitizer build: `src` compiled by clang with ASan and UBSan
 * (the compiler must not treat malloc as a builtin: it would fold the degenerate cases), its
 * references to the library's exported names renamed like the library's (so its malloc is the
 * library's and libc's stays ASan's), linked with the archive and the system libmimalloc.
 */
export function sanitizedProgram(
  kind: SanitizerKind,
  src: string,
  opts: { name?: string; defines?: string[]; internal?: boolean; rename?: boolean; fuzzer?: boolean } = {},
): string {
  const build = sanitizerBuild(kind);
  const cxx = src.endsWith('.cc');
  const name = opts.name ?? src.split('/').pop()!.replace(/\.(c|cc)$/, '');
  const out = join(build.dir, 'bin', name);
  mkdirSync(join(build.dir, 'bin'), { recursive: true });
  const inputs = [src, build.archive, build.syms];
  if (existsSync(out) && inputs.every((f) => statSync(out).mtimeMs >= statSync(f).mtimeMs)) return out;
  const compiler = cxx ? 'clang++' : 'clang';
  const sanitize = opts.fuzzer ? ['-fsanitize=fuzzer,address,undefined'] : ['-fsanitize=address,undefined'];
  const obj = `${out}.o`;
  run(compiler, [
    ...(cxx ? ['-std=c++17'] : ['-std=gnu11']),
    '-g', '-O1', '-fno-omit-frame-pointer', '-fno-builtin', '-fno-sanitize-recover=all', ...sanitize,
    ...(opts.defines ?? []).map((d) => `-D${d}`),
    '-I', join(root, 'native', 'include'),
    ...(opts.internal ? ['-I', join(root, 'native', 'src')] : []),
    '-c', src, '-o', obj,
  ]);
  if (opts.rename !== false) run('objcopy', [`--redefine-syms=${build.syms}`, obj]);
  run(compiler, [...sanitize, '-rdynamic', obj, build.archive, ...mimallocLinkFlags, '-lmimalloc', '-ldl', '-lpthread', '-lm', '-o', out]);
  return out;
}

/** Sanitizer report lines: ASan/LSan/UBSan headers and summaries, UBSan's runtime errors. */
export const SANITIZER_REPORT = /^(?:(?:==\d+==)?(?:ERROR|SUMMARY): (?:AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer)\b.*|.*: runtime error: .*)$/gm;
export const ASAN_REPORT = /^(==[0-9]+==)?(ERROR|SUMMARY): AddressSanitizer.*$/gm;
