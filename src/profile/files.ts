/**
 * Profiles on disk or behind a URL: read with errors that name the source, written
 * atomically. A gzipped input is measured by streaming it through gunzip before it is
 * decompressed for real, so an input that inflates past the limit is refused having held one
 * chunk of it, never the limit's worth.
 */
import { readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { get as httpGet } from 'node:http';
import { get as httpsGet } from 'node:https';
import { createGunzip } from 'node:zlib';

import { FileAccessError, ProfileFormatError } from '../errors.js';
import type { Profile } from './model.js';
import { DEFAULT_MAX_BYTES, parseProfile } from './parse.js';

/** A file error in a few words. */
function reason(e: unknown): string {
  const code = (e as { code?: string }).code;
  switch (code) {
    case 'ENOENT':
      return 'no such file or directory';
    case 'EACCES':
    case 'EPERM':
      return 'permission denied';
    case 'EISDIR':
      return 'it is a directory';
    case 'ENOTDIR':
      return 'a component of the path is not a directory';
    default:
      return e instanceof Error ? e.message.split('\n')[0]! : String(e);
  }
}

/** A file's bytes, at most DEFAULT_MAX_BYTES; errors name the file. */
function readBytes(path: string): Buffer {
  let data: Buffer;
  try {
    const st = statSync(path);
    if (st.isDirectory()) throw Object.assign(new Error('directory'), { code: 'EISDIR' });
    if (st.size > DEFAULT_MAX_BYTES) throw new FileAccessError(`cannot read ${path}: it is larger than 1 GiB`);
    data = readFileSync(path);
  } catch (e) {
    if (e instanceof FileAccessError) throw e;
    throw new FileAccessError(`cannot read ${path}: ${reason(e)}`);
  }
  return data;
}

/** Reads and parses a profile file (any supported format) synchronously; errors name the file. */
export function readProfileFile(path: string): Profile {
  return parseProfile(readBytes(path), path);
}

/**
 * The decompressed size of gzip data, counted chunk by chunk and given up past `limit`
 * ('over'); undefined when the data is not valid gzip (parseProfile then says why).
 */
export function gunzippedSize(data: Uint8Array, limit: number): Promise<number | 'over' | undefined> {
  return new Promise((resolve) => {
    const z = createGunzip();
    let size = 0;
    z.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        z.destroy();
        resolve('over');
      }
    });
    z.on('end', () => resolve(size));
    z.on('error', () => resolve(undefined));
    z.end(data);
  });
}

/** parseProfile after the streamed size check (see the file comment). */
async function parseBounded(data: Uint8Array, name: string): Promise<Profile> {
  if (data.length >= 2 && data[0] === 0x1f && data[1] === 0x8b && (await gunzippedSize(data, DEFAULT_MAX_BYTES)) === 'over') {
    throw new ProfileFormatError(`${name}: decompresses to more than 1 GiB, beyond this tool's limit`);
  }
  return parseProfile(data, name);
}

/** Whether a command-line argument names a URL rather than a file. */
export function isProfileUrl(source: string): boolean {
  return /^https?:\/\//i.test(source);
}

/** A URL of a scheme other than http(s) (`ftp://…`, `file://…`): refused by name rather than
 * read as a file path that does not exist. */
function unsupportedScheme(source: string): string | undefined {
  return /^([a-z][a-z0-9+.-]*):\/\//i.exec(source)?.[1];
}

export interface ReadOptions {
  /** Bearer token for URLs (`Authorization: Bearer …`). */
  token?: string;
  /** Give up on a URL after this long (default 60 s), plus `seconds=N` of a delta request. */
  timeoutMs?: number;
}

/** The body of a profile URL, at most DEFAULT_MAX_BYTES; errors name the URL. */
async function fetchProfileBytes(url: string, options: ReadOptions): Promise<Uint8Array> {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new FileAccessError(`cannot read ${url}: it is not a valid URL`);
  }
  const shown = `${parsed.origin}${parsed.pathname}${parsed.search}`;
  if (parsed.username !== '' || parsed.password !== '') {
    throw new FileAccessError(`cannot read ${shown}: put the credentials in --token (or MIMALLOC_PPROF_TOKEN), not in the URL`);
  }
  const seconds = Number(parsed.searchParams.get('seconds') ?? '') || 0;
  const timeoutMs = (options.timeoutMs ?? 60_000) + Math.min(seconds, 3600) * 1000;
  const headers: Record<string, string> = { 'User-Agent': 'mimalloc-pprof' };
  if (options.token !== undefined && options.token !== '') headers.Authorization = `Bearer ${options.token}`;
  // node:http rather than fetch: any port (fetch refuses some, e.g. 6000), errors with their codes
  const get = parsed.protocol === 'https:' ? httpsGet : httpGet;
  return new Promise<Uint8Array>((resolve, reject) => {
    const fail = (why: string) => reject(new FileAccessError(`cannot read ${shown}: ${why}`));
    const req = get(parsed, { headers, timeout: timeoutMs }, (res) => {
      const status = res.statusCode ?? 0;
      const chunks: Buffer[] = [];
      let size = 0;
      res.on('data', (c: Buffer) => {
        size += c.length;
        if (status === 200 && size > DEFAULT_MAX_BYTES) {
          req.destroy();
          fail("the answer is larger than 1 GiB, beyond this tool's limit");
        } else if (status === 200 || size <= 4096) {
          chunks.push(c);
        }
      });
      res.on('error', (e) => fail(`the answer broke off (${e.message})`));
      res.on('end', () => {
        if (status === 200) return resolve(Buffer.concat(chunks));
        // no redirects followed: a token must not follow one to another server
        const body = Buffer.concat(chunks).toString('utf8').split('\n')[0]!.trim().slice(0, 200);
        const hint =
          status === 401
            ? options.token
              ? ': the server refused the token'
              : ': the server wants a token (--token T, or MIMALLOC_PPROF_TOKEN)'
            : status >= 300 && status < 400
              ? `: it redirects to ${res.headers.location ?? 'another address'}; give that URL`
              : body !== ''
                ? `: ${body}`
                : '';
        fail(`HTTP ${status}${hint}`);
      });
    });
    req.on('timeout', () => req.destroy(Object.assign(new Error(`no answer within ${timeoutMs < 10_000 ? `${timeoutMs / 1000}` : Math.round(timeoutMs / 1000)} s (--timeout sets how long to wait)`), { code: 'ETIMEDOUT' })));
    req.on('error', (e: NodeJS.ErrnoException) => fail(e.code === 'ETIMEDOUT' ? e.message : e.code ? `${e.code} (${e.message})` : e.message));
  });
}

/**
 * Reads and parses a profile from a file or an http(s) URL (a `/debug/pprof/heap`
 * endpoint, with `token` when it wants one). Errors name the source.
 */
export async function readProfile(source: string, options: ReadOptions = {}): Promise<Profile> {
  if (!isProfileUrl(source)) {
    const scheme = unsupportedScheme(source);
    if (scheme !== undefined) throw new FileAccessError(`cannot read ${source}: unsupported URL scheme ${scheme}: (http:// and https:// only; a file is a path)`);
    return parseBounded(readBytes(source), source);
  }
  return parseBounded(await fetchProfileBytes(source, options), source.replace(/^(https?:\/\/)[^/@]*@/i, '$1'));
}

/** Writes a file atomically (temporary file + rename), mode 0600 (narrower when the umask
 * says so): profiles and reports carry what a program held and its command line, which are
 * not for every user of the machine. Errors name the file. */
export function writeFileAtomic(path: string, data: Uint8Array | string): void {
  const tmp = `${path}.tmp-${process.pid}`;
  try {
    // MIMALLOC_PPROF_TEST_OPEN_MODES=1: the tests' control (test/run/modes.test.ts)
    rmSync(tmp, { force: true }); // a leftover of an earlier crash would keep its mode
    writeFileSync(tmp, data, { mode: process.env.MIMALLOC_PPROF_TEST_OPEN_MODES === '1' ? 0o644 : 0o600 });
    renameSync(tmp, path);
  } catch (e) {
    rmSync(tmp, { force: true });
    throw new FileAccessError(`cannot write ${path}: ${reason(e)}`);
  }
}

