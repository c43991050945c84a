#!/usr/bin/env node
import { mkdirSync } from 'node:fs';
import * as nodeModule from 'node:module';
import { join } from 'node:path';

import { cacheFolder } from '../cache-folder.js';

// A closed pipe (`… | head`) ends the output, not with a stack trace.
process.stdout.on('error', (e: NodeJS.ErrnoException) => {
  if (e.code === 'EPIPE') process.exit(process.exitCode ?? 0);
  throw e;
});

// V8's code cache of the package's own modules, kept beside its other caches (a private folder;
// MIMALLOC_PPROF_CACHE_DIR=off: none): the CLI compiles its modules once, not in every run
// (Node 22.8 on; it checks each module's source and compiles afresh when it changed). Nothing
// here may stop the CLI: without a cache folder, it compiles afresh.
const enableCompileCache = (nodeModule as { enableCompileCache?: (dir: string) => unknown }).enableCompileCache;
const cache = enableCompileCache ? cacheFolder() : undefined;
if (enableCompileCache && cache) {
  try {
    const dir = join(cache, 'compile');
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    enableCompileCache(dir);
  } catch {
    // compiled afresh
  }
}

const argv = process.argv.slice(2);
// `run` starts its program before the other commands are loaded (src/cli/run-entry.ts)
process.exitCode = argv[0] === 'run' ? await (await import('./run-entry.js')).runMain(argv.slice(1)) : await (await import('./main.js')).main(argv);
