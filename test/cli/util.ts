/** CLI test support: run main() in-process with captured output, and fixture files. */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { main } from '../../src/cli/main.js';
import { encodeHeapText } from '../../src/profile/heap-text.js';
import { encodeProfile } from '../../src/profile/proto.js';
import { tempDir } from '../helpers.js';
import { demoProfile, makeProfile } from '../profile/util.js';

export interface CliResult {
  status: number;
  stdout: string;
  stderr: string;
}

export async function cli(argv: string[]): Promise<CliResult> {
  let stdout = '';
  let stderr = '';
  const status = await main(argv, { write: (s: string) => (stdout += s) }, { write: (s: string) => (stderr += s) });
  return { status, stdout, stderr };
}

/** A temp directory with demo.pb.gz, demo.heap, base.pb.gz, next.pb.gz, cpu.pb.gz, garbage.pb, two.heap. */
export function cliFixtures(): string {
  const dir = tempDir('mpp-cli-');
  writeFileSync(join(dir, 'demo.pb.gz'), encodeProfile(demoProfile()));
  writeFileSync(join(dir, 'demo.heap'), encodeHeapText(demoProfile()));
  const types: [string, string][] = [
    ['inuse_objects', 'count'],
    ['inuse_space', 'bytes'],
  ];
  writeFileSync(
    join(dir, 'base.pb.gz'),
    encodeProfile(
      makeProfile({
        types,
        samples: [
          { stack: ['leaf', 'cache_fill', 'main'], values: [100, 102400] },
          { stack: ['leaf', 'parse', 'main'], values: [10, 2048] },
          { stack: ['gone', 'main'], values: [1, 4096] },
        ],
      }),
    ),
  );
  writeFileSync(
    join(dir, 'next.pb.gz'),
    encodeProfile(
      makeProfile({
        types,
        samples: [
          { stack: ['leaf', 'cache_fill', 'main'], values: [300, 307200] },
          { stack: ['leaf', 'parse', 'main'], values: [10, 2048] },
          { stack: ['grow', 'main'], values: [1, 1048576] },
        ],
      }),
    ),
  );
  writeFileSync(join(dir, 'cpu.pb.gz'), encodeProfile(makeProfile({ types: [['samples', 'count'], ['cpu', 'nanoseconds']], samples: [{ stack: ['spin'], values: [1, 10] }] })));
  writeFileSync(join(dir, 'garbage.pb'), 'not a profile\n');
  writeFileSync(join(dir, 'two.heap'), 'heap profile: 1: 64 [0: 0] @ heap_v2/524288\n 1: 64 [0: 0] @ 0x1000\n');
  return dir;
}

/** The one-line error contract: exit 2, nothing on stdout, one line on stderr, no stack. */
export function isOneLineError(r: CliResult): boolean {
  return r.status === 2 && r.stdout === '' && /^mimalloc-pprof: [^\n]+\n$/.test(r.stderr) && !/\n\s+at /.test(r.stderr);
}
