/**
 * Command-line plumbing shared by the commands: parseArgs with errors turned into one-line
 * UsageErrors, the value checks of shared options, reading and writing profile files.
 */
import { parseArgs, type ParseArgsConfig } from 'node:util';

import { UsageError } from '../errors.js';
import type { Profile } from '../profile/model.js';
import { readProfile, type ReadOptions } from '../profile/files.js';
import { nameRawProfile } from '../symbolize/raw.js';

/** Where a command writes: anything with write(string) (process.stdout, a test buffer). */
export interface Out {
  write(s: string): unknown;
}

export interface Io {
  out: Out;
  err: Out;
}

/** One CLI command: its one-line summary, its --help text, and its body. */
export interface Command {
  summary: string;
  run(argv: string[], io: Io): number | Promise<number>;
}

type Options = NonNullable<ParseArgsConfig['options']>;

/**
 * parseArgs (strict, with positionals) for `command`; `--help`/`-h` is added. Returns null
 * when help was asked for (the caller prints it and exits 0).
 */
export function parseCommandArgs<O extends Options>(
  command: string,
  argv: string[],
  options: O,
  positionals: { min: number; max: number; names: string },
): { values: Record<string, string | boolean | undefined>; positionals: string[] } | null {
  // A value that starts with '-' (`-n -5`) reads as an option to parseArgs ("argument is
  // ambiguous"): a negative number after an option that takes a value is that value, so the
  // option's own check can say what is wrong with it.
  const takesValue = (arg: string): string | undefined => {
    const long = /^--([^=]+)$/.exec(arg)?.[1];
    if (long !== undefined) return options[long]?.type === 'string' ? long : undefined;
    const short = /^-([^-])$/.exec(arg)?.[1];
    return short === undefined ? undefined : Object.entries(options).find(([, o]) => o.short === short && o.type === 'string')?.[0];
  };
  const joined: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--') {
      joined.push(...argv.slice(i));
      break;
    }
    const name = takesValue(arg);
    const next = argv[i + 1];
    if (name !== undefined && next !== undefined && /^-\d/.test(next)) {
      joined.push(`--${name}=${next}`);
      i++;
    } else joined.push(arg);
  }
  argv = joined;
  let parsed;
  try {
    parsed = parseArgs({ args: argv, options: { ...options, help: { type: 'boolean', short: 'h' } }, allowPositionals: true, strict: true });
  } catch (e) {
    const msg = e instanceof Error ? e.message.split('\n')[0]!.replace(/\. To specify a positional.*$/, '') : String(e);
    throw new UsageError(`${command}: ${msg} (see mimalloc-pprof ${command} --help)`);
  }
  const values = parsed.values as Record<string, string | boolean | undefined>;
  if (values.help === true) return null;
  const n = parsed.positionals.length;
  if (n < positionals.min || n > positionals.max) {
    throw new UsageError(`${command} takes ${positionals.names} (got ${n === 0 ? 'nothing' : parsed.positionals.join(' ')})`);
  }
  return { values, positionals: parsed.positionals };
}

/** The sample types a command can show, by name. */
export const SAMPLE_INDEXES = ['inuse_space', 'inuse_objects', 'alloc_space', 'alloc_objects'] as const;
export type SampleIndexName = (typeof SAMPLE_INDEXES)[number];

export function sampleIndexArg(command: string, value: string | boolean | undefined): SampleIndexName {
  if (value === undefined) return 'inuse_space';
  if (typeof value === 'string' && (SAMPLE_INDEXES as readonly string[]).includes(value)) return value as SampleIndexName;
  throw new UsageError(`${command}: --sample-index must be one of ${SAMPLE_INDEXES.join(', ')} (got ${String(value)})`);
}

export function countArg(command: string, value: string | boolean | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value === 'string' && /^[0-9]{1,9}$/.test(value) && Number(value) > 0) return Number(value);
  throw new UsageError(`${command}: -n must be a positive integer (got ${String(value)})`);
}

export { readProfileFile, writeFileAtomic } from '../profile/files.js';

/** The options of the commands that read profiles: a bearer token and a timeout for URLs. */
export const TOKEN_OPTION = { token: { type: 'string' }, timeout: { type: 'string' } } as const;

export const SOURCE_HELP = `FILE may also be an http(s) URL of a /debug/pprof endpoint, e.g.
http://127.0.0.1:6060/debug/pprof/heap; --token T (or MIMALLOC_PPROF_TOKEN) is sent as
"Authorization: Bearer T"; --timeout 60s is how long to wait for its answer (default 60s,
plus the window of a ?seconds=N request; 500ms, 10s, 2m).`;

/** How to read URLs: --token (else MIMALLOC_PPROF_TOKEN) and --timeout. */
export function sourceArgs(command: string, values: Record<string, string | boolean | undefined>, env: NodeJS.ProcessEnv = process.env): ReadOptions {
  const token = tokenArg(command, values.token, env);
  const timeout = values.timeout;
  const options: ReadOptions = token === undefined ? {} : { token };
  if (timeout === undefined) return options;
  const m = typeof timeout === 'string' ? /^(\d+(?:\.\d+)?)(ms|s|m)$/.exec(timeout) : null;
  const ms = m ? Number(m[1]) * (m[2] === 'ms' ? 1 : m[2] === 's' ? 1000 : 60_000) : NaN;
  if (!(ms >= 1 && ms <= 24 * 3600_000)) throw new UsageError(`${command}: --timeout must be a duration up to 24h like 500ms, 10s or 2m (got ${String(timeout)})`);
  return { ...options, timeoutMs: Math.round(ms) };
}

/** The token for URLs: --token, else MIMALLOC_PPROF_TOKEN. */
export function tokenArg(command: string, value: string | boolean | undefined, env: NodeJS.ProcessEnv = process.env): string | undefined {
  if (value === undefined) return env.MIMALLOC_PPROF_TOKEN || undefined;
  if (typeof value !== 'string' || value === '' || /\s/.test(value)) throw new UsageError(`${command}: --token must be a non-empty word`);
  return value;
}

/** A profile from a file or URL, its raw frames named (src/symbolize/raw.ts): what top and diff read. */
export async function readNamedProfile(source: string, options: string | ReadOptions = {}): Promise<Profile> {
  const profile = await readProfile(source, typeof options === 'string' ? { token: options } : options);
  nameRawProfile(profile);
  return profile;
}

export { splitCommandLine } from './split.js';
