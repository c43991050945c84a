/** Gate 4, fuzzing (docs/reliability.md).
 *
 * The C API: a libFuzzer harness (test/fuzz/api_fuzz.c) drives random sequences of the
 * allocator API with the profiler started, stopped, reset, dumped and reconfigured in between,
 * built with -fsanitize=fuzzer,address,undefined against the library's sources built the same
 * way (build/fuzz). It runs for a bounded time from the corpus kept in test/fuzz/corpus/api
 * (read only: new units go to a temporary directory), each input bounded too (-timeout: a
 * deadlock is a finding). Control: the harness built with -DPLANTED_BUG (a free path that skips
 * the profiler's bookkeeping) is found from an empty corpus within the bound.
 *
 * The parsers: test/profile/fuzz.test.ts runs the generated 10 500-input corpus through the
 * heap_v2 and proto parsers (every input parses to a valid profile or is rejected with a
 * ProfileFormatError). Control here: the same corpus and rule catch a parser with a planted
 * bug (a sample without locations assumed impossible). */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { ProfileFormatError } from '../../src/errors.js';
import { parseProfile } from '../../src/profile/parse.js';
import { root, tempDir } from '../helpers.js';
import { corpus } from '../profile/corpus.js';
import { firstPass } from '../mimalloc.js';
import { sanitizedProgram } from './util.js';

const HARNESS = join(root, 'test', 'fuzz', 'api_fuzz.c');
const CORPUS = join(root, 'test', 'fuzz', 'corpus', 'api');
const GATE_SECONDS = firstPass ? 20 : 10; /* the later passes repeat it shorter */
const CONTROL_SECONDS = 90;
const INPUT_TIMEOUT_S = 25;

/** libFuzzer's own report lines, and the sanitizers' and the harness's. */
const FINDING = /^(?:==\d+== ?ERROR: libFuzzer: .*|(?:==\d+==)?(?:ERROR|SUMMARY): (?:AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|libFuzzer)\b.*|.*: runtime error: .*|api_fuzz: invariant broken: .*)$/gm;

function libFuzzer(bin: string, corpora: string[], seconds: number, extra: string[] = []) {
  const work = tempDir('mpp-fuzz-');
  const r = spawnSync(
    bin,
    [`-max_total_time=${seconds}`, `-timeout=${INPUT_TIMEOUT_S}`, '-rss_limit_mb=4096', '-max_len=512', '-print_final_stats=1',
      `-artifact_prefix=${work}/`, ...extra, ...corpora],
    {
      cwd: work,
      encoding: 'utf8',
      timeout: (seconds + 120) * 1000,
      maxBuffer: 256 << 20,
      env: Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('MIMALLOC_') && k !== 'LD_PRELOAD')),
    },
  );
  if (r.error) throw r.error;
  const log = r.stderr;
  const findings = [...log.matchAll(FINDING)].map((m) => m[0]);
  const artifacts = readdirSync(work).filter((f) => /^(crash|leak|timeout|oom|slow-unit)-/.test(f));
  return { status: r.status, log, findings, artifacts };
}

test(`fuzz: the allocator API under the profiler, ${GATE_SECONDS} s of libFuzzer from the committed corpus, finds nothing`, (t) => {
  const bin = sanitizedProgram('fuzz', HARNESS, { fuzzer: true, rename: false });
  const fresh = tempDir('mpp-fuzz-corpus-');
  const r = libFuzzer(bin, [fresh, CORPUS], GATE_SECONDS);
  const lines = r.log.split('\n');
  const inited = lines.find((l) => /\sINITED\s/.test(l));
  const done = lines.find((l) => /\sDONE\s/.test(l));
  const stats = lines.filter((l) => l.startsWith('stat::')).join(', ');
  t.diagnostic(`fuzz: ${readdirSync(CORPUS).length} committed inputs; ${inited?.replace(/^#\d+\s+/, 'replayed: ')}`);
  t.diagnostic(`fuzz: ${done?.replace(/^#(\d+)\s+/, '$1 runs: ')}; ${readdirSync(fresh).length} new units (not kept)`);
  t.diagnostic(`fuzz: ${stats}`);
  assert.deepEqual(r.findings, [], r.log.slice(-4000));
  assert.equal(r.status, 0, r.log.slice(-4000));
  assert.ok(done !== undefined, 'libFuzzer did not finish its run');
});

test('positive control: a planted bug (a free that skips the profiler) is found within the bound', (t) => {
  const bin = sanitizedProgram('fuzz', HARNESS, { fuzzer: true, rename: false, name: 'api_fuzz_planted', defines: ['PLANTED_BUG'] });
  const started = performance.now();
  const r = libFuzzer(bin, [tempDir('mpp-fuzz-empty-')], CONTROL_SECONDS, ['-seed=1']);
  const seconds = (performance.now() - started) / 1000;
  for (const line of r.findings) t.diagnostic(`control caught: ${line}`);
  t.diagnostic(`control: found in ${seconds.toFixed(1)} s from an empty corpus; artifact ${r.artifacts.join(', ')}`);
  assert.notEqual(r.status, 0);
  assert.ok(r.findings.some((l) => /^==\d+== ?ERROR: libFuzzer: deadly signal/.test(l)), r.log.slice(-3000));
  assert.ok(r.findings.some((l) => l.startsWith('api_fuzz: invariant broken: ')), r.log.slice(-3000));
  assert.ok(r.artifacts.some((f) => f.startsWith('crash-')), 'libFuzzer wrote the crashing input');
});

test('positive control: the parser fuzz corpus and rule catch a parser with a planted bug', (t) => {
  // planted: a "parser" that assumes every sample has a location (profiles with empty stacks exist)
  const planted = (data: Uint8Array, name: string) => {
    const p = parseProfile(data, name);
    for (const s of p.sample) if (s.locationId[0]!.toString() === '') throw new Error('unreachable');
    return p;
  };
  let escaped: string | undefined;
  let n = 0;
  for (const input of corpus(10_500)) {
    n++;
    try {
      planted(input.data, 'fuzz.input');
    } catch (e) {
      if (!(e instanceof ProfileFormatError)) {
        escaped = `${input.kind}: ${e instanceof Error ? `${e.name}: ${e.message}` : String(e)}`;
        break;
      }
    }
  }
  t.diagnostic(`control caught: input ${n} of the corpus escapes as something other than ProfileFormatError: ${escaped}`);
  assert.ok(escaped !== undefined, 'the corpus did not reach the planted bug');
});
