// `npm run demo`: builds the bundled demo program, runs it on mimalloc with the profiler on
// (exactly as a user would with LD_PRELOAD), and shows where its in-use memory is with the
// real google/pprof. Sets up what is missing first (the preload library; go tool pprof).
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const lib = join(root, 'build', 'libmimalloc-pprof.so');
const out = join(root, 'build', 'demo');
mkdirSync(out, { recursive: true });

const step = (msg) => console.log(`\n== ${msg}`);
const sh = (cmd, args, opts = {}) => {
  const r = spawnSync(cmd, args, { stdio: 'inherit', ...opts });
  if (r.status !== 0) {
    console.error(`demo: ${cmd} ${args.join(' ')} failed`);
    process.exit(1);
  }
};

if (!existsSync(lib)) sh(process.execPath, [join(root, 'scripts', 'setup.mjs')]);
if (spawnSync('sh', ['-c', 'command -v go'], { stdio: 'ignore' }).status !== 0) {
  sh(process.execPath, [join(root, 'scripts', 'setup-test.mjs')]);
}

step('build the demo program (examples/demo.c)');
const bin = join(out, 'demo');
sh('cc', ['-g', '-O1', '-fno-omit-frame-pointer', join(root, 'examples', 'demo.c'), '-o', bin]);

step(`run it on mimalloc with the heap profiler: LD_PRELOAD=${lib}`);
const profile = join(out, 'demo.pb');
const heap = join(out, 'demo.heap');
sh(bin, [], {
  env: {
    ...process.env,
    LD_PRELOAD: lib,
    MIMALLOC_PROF: '1',
    MIMALLOC_PROF_VERBOSE: '1',
    MIMALLOC_PROF_DUMP_AT_EXIT: profile,
    MIMALLOC_PROF_DUMP_FORMAT: 'proto',
  },
});
sh(bin, [], {
  stdio: 'ignore',
  env: { ...process.env, LD_PRELOAD: lib, MIMALLOC_PROF: '1', MIMALLOC_PROF_DUMP_AT_EXIT: heap },
});

step(`in-use memory by function (go tool pprof -top ${profile})`);
const top = execFileSync('go', ['tool', 'pprof', '-top', '-nodecount=12', bin, profile], { encoding: 'utf8' });
console.log(top.trimEnd());
console.log(`\nProfiles written: ${profile} (profile.proto) and ${heap} (heap_v2 text).`);
console.log(`Explore: go tool pprof -http=127.0.0.1:8080 ${bin} ${profile}`);
