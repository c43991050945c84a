#!/usr/bin/env node
// A closed pipe (`… | head`) ends the output, not with a stack trace.
process.stdout.on('error', (e: NodeJS.ErrnoException) => {
  if (e.code === 'EPIPE') process.exit(process.exitCode ?? 0);
  throw e;
});

const argv = process.argv.slice(2);
// `run` starts its program before the other commands are loaded (src/cli/run-entry.ts)
process.exitCode = argv[0] === 'run' ? await (await import('./run-entry.js')).runMain(argv.slice(1)) : await (await import('./main.js')).main(argv);
