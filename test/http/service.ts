/** The test service (fixtures/service.mjs) as a child process under the preload, and HTTP helpers. */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { rmSync } from 'node:fs';
import { request, type Agent, type IncomingHttpHeaders } from 'node:http';
import { join } from 'node:path';

import { libraryPath } from '../../src/preload/library.js';
import { root, tempDir } from '../helpers.js';

export const serviceScript = join(root, 'test', 'http', 'fixtures', 'service.mjs');

export interface Response {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

/** GET (or another method) on loopback; a connection of its own unless `agent` (no keep-alive races). */
export function httpGet(port: number, path: string, options: { agent?: Agent; method?: string; headers?: Record<string, string>; timeoutMs?: number } = {}): Promise<Response> {
  return new Promise((resolve, reject) => {
    const req = request(
      { host: '127.0.0.1', port, path, method: options.method ?? 'GET', headers: options.headers, agent: options.agent ?? false, timeout: options.timeoutMs ?? 30_000 },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error(`GET ${path} timed out`)));
    req.on('error', reject);
    req.end();
  });
}

export async function getJson<T>(port: number, path: string): Promise<T> {
  const r = await httpGet(port, path);
  if (r.status !== 200) throw new Error(`GET ${path}: ${r.status} ${r.body.toString()}`);
  return JSON.parse(r.body.toString()) as T;
}

export interface Service {
  readonly child: ChildProcess;
  readonly pid: number;
  readonly ports: { http: number; express?: number; fastify?: number; serve?: number; serveHost?: string };
  /** Everything the service wrote to stderr so far. */
  stderr(): string;
  get(path: string, port?: number): Promise<Response>;
  json<T>(path: string): Promise<T>;
  stop(): Promise<void>;
}

/**
 * Starts the service: under the preload (profiling on, cumulative mode, V8's perf map) unless
 * `preload` is false; `env` adds variables. Resolves once it printed its ports.
 */
export async function startService(env: Record<string, string> = {}, options: { preload?: boolean; nodeOptions?: string[] } = {}): Promise<Service> {
  const cwd = tempDir('mpp-service-'); // V8 writes isolate-*.log files into the working directory
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('MIMALLOC_') && k !== 'NODE_OPTIONS' && k !== 'LD_PRELOAD'));
  const preload = options.preload !== false;
  const childEnv: Record<string, string | undefined> = {
    ...clean,
    ...(preload ? { LD_PRELOAD: libraryPath(), MIMALLOC_PROF: '1', MIMALLOC_PROF_ACCUM: '1' } : {}),
    NODE_OPTIONS: ['--perf-basic-prof', '--interpreted-frames-native-stack', ...(options.nodeOptions ?? [])].join(' '),
    ...env,
  };
  const child = spawn(process.execPath, [serviceScript], { cwd, env: childEnv, stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  let stdout = '';
  child.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
  const ports = await new Promise<Service['ports']>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the service did not start in 20 s; stderr:\n${stderr}`)), 20_000);
    child.stdout!.on('data', (c: Buffer) => {
      stdout += c.toString();
      const nl = stdout.indexOf('\n');
      if (nl >= 0) {
        clearTimeout(timer);
        resolve(JSON.parse(stdout.slice(0, nl)) as Service['ports']);
      }
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`the service exited (${code ?? signal}) before printing its ports; stderr:\n${stderr}`));
    });
  });
  const pid = child.pid!;
  return {
    child,
    pid,
    ports,
    stderr: () => stderr,
    get: (path, port = ports.http) => httpGet(port, path),
    json: <T>(path: string) => getJson<T>(ports.http, path),
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((resolve) => child.once('exit', resolve));
        child.kill('SIGTERM');
        await exited;
      }
      rmSync(`/tmp/perf-${pid}.map`, { force: true });
      rmSync(cwd, { recursive: true, force: true });
    },
  };
}

/** `go tool pprof ARGS…` (the real client), asynchronously; resolves to stdout + stderr. */
export function goPprof(args: string[], timeoutMs = 60_000): Promise<{ code: number; out: string }> {
  const dir = tempDir('mpp-pprof-');
  return new Promise((resolve) => {
    execFile('go', ['tool', 'pprof', ...args], { env: { ...process.env, PPROF_TMPDIR: dir }, timeout: timeoutMs, maxBuffer: 64 << 20 }, (error, stdout, stderr) => {
      rmSync(dir, { recursive: true, force: true });
      resolve({ code: error ? ((error as { code?: number }).code ?? 1) : 0, out: `${stdout}\n${stderr}` });
    });
  });
}

/** Polls `check` every 50 ms until it is true or `timeoutMs` passed. */
export async function waitFor(check: () => Promise<boolean> | boolean, timeoutMs: number, what = 'condition'): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** The function names of pprof's -top listing (last column). */
export function topNames(out: string): string[] {
  return out
    .split('\n')
    .map((l) => /^\s*\S+\s+\S+%\s+\S+%\s+\S+\s+\S+%\s+(.*)$/.exec(l)?.[1]?.trim())
    .filter((n): n is string => n !== undefined);
}
