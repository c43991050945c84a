// `npm run demo`: the main job on the bundled demos. `mimalloc-pprof run` puts each on
// mimalloc with the heap profiler on, writes a symbolised profile.proto per process and prints
// where the in-use native memory is, by function (JavaScript functions named inside the native
// stacks). Sets up what is missing first (the preload library, the compiled CLI).
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const out = join(root, 'build', 'demo');
mkdirSync(out, { recursive: true });
const cli = join(root, 'dist', 'src', 'cli', 'bin.js');

const step = (msg) => console.log(`\n== ${msg}`);
const sh = (cmd, args, opts = {}) => {
  const r = spawnSync(cmd, args, { stdio: 'inherit', ...opts });
  if (r.status !== 0) {
    console.error(`demo: ${cmd} ${args.join(' ')} failed (${r.status ?? r.signal})`);
    process.exit(1);
  }
};

if (!existsSync(join(root, 'build', 'libmimalloc-pprof.so'))) sh(process.execPath, [join(root, 'scripts', 'setup.mjs')]);
if (!existsSync(cli)) sh('npx', ['tsc', '-p', join(root, 'tsconfig.json')], { cwd: root });

step('a Node service whose RSS grows while its V8 heap stays flat (examples/demo-node.cjs)');
const nodeProfile = join(out, 'demo-node.pb.gz');
sh(process.execPath, [cli, 'run', '--top', '12', '--html', '--out', nodeProfile, '--', 'node', join(root, 'examples', 'demo-node.cjs')], { cwd: out });

step('a C program (examples/demo.c)');
const bin = join(out, 'demo');
sh('cc', ['-g', '-O1', join(root, 'examples', 'demo.c'), '-o', bin]);
const cProfile = join(out, 'demo-c.pb.gz');
sh(process.execPath, [cli, 'run', '--top', '8', '--out', cProfile, '--', bin], { cwd: out });

console.log(`\nNext: open ${nodeProfile.replace(/\.pb\.gz$/, '.html')} in a browser (the offline report: flame graph, tables)`);
console.log(`      npx mimalloc-pprof top ${nodeProfile} -n 30`);
console.log(`      go tool pprof -http=127.0.0.1:8080 ${nodeProfile}   (opens anywhere: the profile is self-contained)`);
