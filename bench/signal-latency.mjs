// How long a signal takes to end a busy Node program holding LIVE MiB of Buffers, under
// `mimalloc-pprof run` (which writes the profile before the program dies) and plainly, in
// paired, interleaved runs: for each pair the two orders alternate, and the figure is the
// time from the signal to the end of the process that received it (run's own exit for the
// run row, so it includes the profile being named and written).
//   node bench/signal-latency.mjs [--pairs 10] [--live 100] [--signal SIGTERM] [--write]
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const cli = join(root, 'dist', 'src', 'cli', 'bin.js');
const { values } = parseArgs({
  options: { pairs: { type: 'string', default: '10' }, live: { type: 'string', default: '100' }, signal: { type: 'string', default: 'SIGTERM' }, write: { type: 'boolean', default: false } },
});
const pairs = Number(values.pairs);
const live = Number(values.live);
const signal = values.signal;
const program = `globalThis.k=[];for(let i=0;i<${live * 16};i++)globalThis.k.push(Buffer.alloc(65536,1));console.log('ready');for(;;){}`;

const alive = (pid) => {
  try {
    process.kill(pid, 0);
    return !readFileSync(`/proc/${pid}/stat`, 'utf8').includes(') Z');
  } catch {
    return false;
  }
};

/** Starts argv, waits for "ready", signals it, and resolves with the ms until the program
 * (argv's process, or run's child) ended and until argv's process ended. */
function once(argv, cwd, viaRun) {
  return new Promise((resolve, reject) => {
    const child = spawn(argv[0], argv.slice(1), { cwd, stdio: ['ignore', 'pipe', 'ignore'] });
    let t0 = 0;
    let programMs = 0;
    child.stdout.on('data', (d) => {
      if (t0 !== 0 || !String(d).includes('ready')) return;
      const program = viaRun ? Number(readFileSync(`/proc/${child.pid}/task/${child.pid}/children`, 'utf8').trim().split(/\s+/).find((p) => !readFileSync(`/proc/${p}/cmdline`, 'utf8').includes('watchdog'))) : child.pid;
      t0 = performance.now();
      child.kill(signal);
      const poll = setInterval(() => {
        if (!alive(program)) {
          programMs = performance.now() - t0;
          clearInterval(poll);
        }
      }, 2);
      child.on('exit', () => clearInterval(poll));
    });
    child.on('exit', (code, sig) => {
      if (!t0) return reject(new Error(`ended before ready: ${code} ${sig}`));
      const ms = performance.now() - t0;
      resolve({ ms, programMs: programMs || ms });
    });
  });
}

const dir = mkdtempSync(join(tmpdir(), 'mpp-siglat-'));
const rows = { plain: [], run: [] };
const runEnds = [];
try {
  for (let i = 0; i < pairs; i++) {
    const order = i % 2 === 0 ? ['plain', 'run'] : ['run', 'plain'];
    for (const which of order) {
      const argv = which === 'plain' ? [process.execPath, '-e', program] : [process.execPath, cli, 'run', '--top', '0', '--out', join(dir, 'p.pb.gz'), '--', process.execPath, '-e', program];
      const r = await once(argv, dir, which === 'run');
      rows[which].push(r.programMs);
      if (which === 'run') runEnds.push(r.ms);
    }
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const ratios = rows.run.map((r, i) => r - rows.plain[i]);
const out = [
  `${signal} to a busy Node program holding ${live} MiB of Buffers, ${pairs} interleaved pairs (ms from the signal):`,
  `  plain node: median ${median(rows.plain).toFixed(0)} (min ${Math.min(...rows.plain).toFixed(0)}, max ${Math.max(...rows.plain).toFixed(0)})`,
  `  under run:  median ${median(rows.run).toFixed(0)} (min ${Math.min(...rows.run).toFixed(0)}, max ${Math.max(...rows.run).toFixed(0)}) until the program ended, its raw profile written`,
  `  paired extra time of the program under run: median ${median(ratios).toFixed(0)} ms`,
  `  run itself ended after: median ${median(runEnds).toFixed(0)} ms (the profile named, written and summarised)`,
].join('\n');
console.log(out);
if (values.write) {
  const readme = join(root, 'bench', 'README.md');
  const text = readFileSync(readme, 'utf8');
  const section = `## signal latency under run\n\nMeasured by [\`signal-latency.mjs\`](signal-latency.mjs) (\`node bench/signal-latency.mjs --write\`):\n\n\`\`\`\n${out}\n\`\`\`\n`;
  const re = /## signal latency under run\n[\s\S]*?(?=\n## |$)/;
  writeFileSync(readme, re.test(text) ? text.replace(re, section) : `${text.trimEnd()}\n\n${section}`);
}
