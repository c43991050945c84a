/** `mimalloc-pprof run …` without loading the rest of the CLI: errors as main() reports them
 * (one line; 2 for usage and bad input, 1 for an internal error). */
import { debuglog } from 'node:util';

import { MimallocPprofError } from '../errors.js';

const debug = debuglog('mimalloc-pprof');

export async function runMain(argv: string[]): Promise<number> {
  try {
    const { runCommand } = await import('./run.js');
    return await runCommand(argv);
  } catch (e) {
    const oneLine = (s: string) => s.replace(/\s*[\r\n]+\s*/g, ' ').trim();
    if (e instanceof MimallocPprofError) {
      process.stderr.write(`mimalloc-pprof: ${oneLine(e.message)}\n`);
      return 2;
    }
    debug('%s', e instanceof Error ? e.stack : String(e));
    process.stderr.write(`mimalloc-pprof: internal error: ${oneLine(e instanceof Error ? e.message : String(e))} (details with NODE_DEBUG=mimalloc-pprof)\n`);
    return 1;
  }
}
