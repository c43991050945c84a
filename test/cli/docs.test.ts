/**
 * What the README and the help texts tell a user agree with each other and with the CLI:
 * the exit status of a program the preload cannot reach (3), `--bt-max`'s default under `run`
 * and MIMALLOC_PROF_BT_MAX's own, and the by-hand LD_PRELOAD recipes quoted. Each check also
 * runs on the text as it stood before (the control: it fails there).
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { RUN_HELP } from '../../src/cli/run.js';
import { root } from '../helpers.js';

const readme = readFileSync(join(root, 'README.md'), 'utf8');

/** The problems of a README (empty: none). */
function problems(text: string, help: string): string[] {
  const out: string[] = [];
  const exitCodes = /Exit codes:[\s\S]*?\n\n/.exec(text)?.[0] ?? '';
  if (!/status 3/.test(exitCodes)) out.push('the exit codes do not give status 3 for a program the preload did not reach');
  const helpDefault = /--bt-max N\s+stack depth, 1-128 \(default (\d+)/.exec(help)?.[1];
  const envRow = /\| `MIMALLOC_PROF_BT_MAX` \|[^|]*\| ([^|]*) \|/.exec(text)?.[1] ?? '';
  if (helpDefault === undefined || !envRow.includes(`run\` sets ${helpDefault}`)) out.push(`MIMALLOC_PROF_BT_MAX's row (${envRow.trim()}) does not give run's default ${helpDefault}`);
  const unquoted = text.match(/LD_PRELOAD=\$\(npx mimalloc-pprof lib\)/g) ?? [];
  if (unquoted.length > 0) out.push(`${unquoted.length} LD_PRELOAD recipe(s) unquoted`);
  return out;
}

test('README: exit status 3, --bt-max defaults and quoted LD_PRELOAD recipes agree with the CLI', () => {
  assert.deepEqual(problems(readme, RUN_HELP), []);
});

test('positive control: the earlier wording fails each check', () => {
  const before = readme
    .replace(/effect \(static or setuid binaries\)[^\n]*\n[^\n]*\n/, 'effect (static or setuid binaries).\n')
    .replace(/\| 32 \(`run` sets 64: `--bt-max`\) \|/, '| 32 |')
    .replaceAll('LD_PRELOAD="$(npx mimalloc-pprof lib)"', 'LD_PRELOAD=$(npx mimalloc-pprof lib)');
  assert.equal(problems(before, RUN_HELP).length, 3, problems(before, RUN_HELP).join('; '));
});
