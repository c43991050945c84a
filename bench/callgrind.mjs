#!/usr/bin/env node
// Instructions per malloc/free pair, counted by valgrind's callgrind, for the system glibc,
// plain mimalloc and the preload library armed-but-stopped and profiling. See bench/README.md.
//
//   node bench/callgrind.mjs [--quick] [--json] [--write] [--n1=N] [--n2=N]
//                            [--mimalloc=PATH] [--no-build]
//
// Each configuration runs bench/pairs.c under `valgrind --tool=callgrind` at two iteration
// counts N1 < N2; instructions per pair = (Ir(N2) - Ir(N1)) / (N2 - N1), so start-up, the
// ring's fill and drain, and the profiler's set-up cancel. `callgrind_annotate` gives the same
// difference per function, which says where a configuration's extra instructions go.
//
//   --quick      small N (for the test suite): 20k and 120k instead of 200k and 1.2M
//   --json       print the results as JSON on stdout instead of the table
//   --write      also rewrite the figures block of bench/README.md
//   --mimalloc=  the plain libmimalloc to compare with (default: the one the preload library
//                links, from ldd)
//   --no-build   use build/libmimalloc-pprof.so as it is (default: `node scripts/setup.mjs`,
//                an incremental make, so the figures are those of the current sources)
// MIMALLOC_PPROF_LIB, as for the package, names another preload library (and skips the build).
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const readme = join(root, 'bench', 'README.md');
const BEGIN = '<!-- callgrind:begin -->';
const END = '<!-- callgrind:end -->';
const TARGET = 1.05; // armed-but-stopped vs plain mimalloc
const COMMAND = 'npm run bench';

// ---- arguments ------------------------------------------------------------------------------
const args = process.argv.slice(2);
const flag = (name) => args.includes(`--${name}`);
const option = (name) => {
  const a = args.find((x) => x.startsWith(`--${name}=`));
  return a === undefined ? undefined : a.slice(name.length + 3);
};
const known = /^--(quick|json|write|no-build|n1=\d+|n2=\d+|mimalloc=.+|help)$/;
for (const a of args) {
  if (!known.test(a)) die(`unknown argument ${a} (see the head of bench/callgrind.mjs)`);
}
if (flag('help')) {
  console.log('usage: node bench/callgrind.mjs [--quick] [--json] [--write] [--n1=N] [--n2=N] [--mimalloc=PATH] [--no-build]');
  process.exit(0);
}
const quick = flag('quick');
const json = flag('json');
const write = flag('write');
const N1 = Number(option('n1') ?? (quick ? 20_000 : 200_000));
const N2 = Number(option('n2') ?? (quick ? 120_000 : 1_200_000));
if (!(N2 > N1 && N1 >= 0)) die(`need N2 > N1 (got ${N1}, ${N2})`);

function die(message) {
  console.error(`bench/callgrind: ${message}`);
  process.exit(1);
}

/** Progress goes to stderr so that --json keeps stdout clean. */
function note(message) {
  if (!json) console.error(message);
}

function sh(cmd, argv, opts = {}) {
  const r = spawnSync(cmd, argv, { encoding: 'utf8', maxBuffer: 256 << 20, ...opts });
  if (r.error) throw r.error;
  return r;
}

function which(cmd) {
  return sh('sh', ['-c', `command -v ${cmd}`]).status === 0;
}

// ---- prerequisites ----------------------------------------------------------------------------
if (!which('valgrind')) {
  die('valgrind is not installed (Debian/Ubuntu: apt-get install valgrind); the benchmark counts instructions with valgrind --tool=callgrind');
}
const haveAnnotate = which('callgrind_annotate');

/** The preload library: MIMALLOC_PPROF_LIB, or build/ after an incremental build. */
function preloadLibrary() {
  const override = process.env.MIMALLOC_PPROF_LIB;
  if (override) {
    if (!existsSync(override)) die(`MIMALLOC_PPROF_LIB points at ${override}, which does not exist`);
    return resolve(override);
  }
  const built = join(root, 'build', 'libmimalloc-pprof.so');
  if (!flag('no-build') || !existsSync(built)) {
    const r = sh(process.execPath, [join(root, 'scripts', 'setup.mjs')], { cwd: root });
    if (r.status !== 0) die(`building the preload library failed:\n${r.stdout}${r.stderr}`);
  }
  if (!existsSync(built)) die(`${built} is missing after the build`);
  return built;
}

/** The system libmimalloc that the preload library forwards to, from ldd. */
function mimallocLibrary(preload) {
  const given = option('mimalloc');
  if (given !== undefined) {
    if (!existsSync(given)) die(`--mimalloc=${given} does not exist`);
    return realpathSync(given);
  }
  const r = sh('ldd', [preload]);
  const m = /^\s*(libmimalloc[^\s]*\.so[^\s]*)\s+=>\s+(\/\S+)/m.exec(r.stdout ?? '');
  if (m) return realpathSync(m[2]);
  // a preload library built with MIMALLOC_PREFIX and an rpath ldd cannot follow: ask ldconfig
  const c = sh('sh', ['-c', 'ldconfig -p 2>/dev/null']);
  const l = /libmimalloc\.so[^\s]*\s+\([^)]*x86-64[^)]*\)\s+=>\s+(\/\S+)/.exec(c.stdout ?? '') ??
    /libmimalloc\.so[^\s]*\s+\([^)]*\)\s+=>\s+(\/\S+)/.exec(c.stdout ?? '');
  if (l) return realpathSync(l[1]);
  die(`cannot find the libmimalloc that ${preload} links (ldd said:\n${r.stdout}${r.stderr}); pass --mimalloc=PATH`);
}

/** bench/pairs.c -> build/bench/pairs, when missing or older than its source. */
function buildWorkload() {
  const src = join(root, 'bench', 'pairs.c');
  const outDir = join(root, 'build', 'bench');
  const out = join(outDir, 'pairs');
  mkdirSync(outDir, { recursive: true });
  if (existsSync(out) && statSync(out).mtimeMs >= statSync(src).mtimeMs) return out;
  const r = sh(process.env.CC || 'cc', ['-O2', '-o', out, src, '-ldl']);
  if (r.status !== 0) die(`compiling bench/pairs.c failed:\n${r.stderr}`);
  return out;
}

/** bench/forward.c -> build/bench/libforward.so against the same libmimalloc (always rebuilt:
 * it is one small file, and the mimalloc it links may change with --mimalloc). */
function buildForwarder(mimalloc) {
  const src = join(root, 'bench', 'forward.c');
  const out = join(root, 'build', 'bench', 'libforward.so');
  const flags = ['-O2', '-fPIC', '-shared', '-fvisibility=hidden', '-fno-plt', '-o', out, src, mimalloc];
  const r = sh(process.env.CC || 'cc', [...flags, `-Wl,-rpath,${dirname(mimalloc)}`, '-Wl,-z,now']);
  if (r.status !== 0) die(`compiling bench/forward.c failed:\n${r.stderr}`);
  return out;
}

const preload = preloadLibrary();
const mimalloc = mimallocLibrary(preload);
const pairs = buildWorkload();
const forward = buildForwarder(mimalloc);

// ---- configurations -----------------------------------------------------------------------------
const SEED = { MIMALLOC_PROF_SEED: '1' }; // a fixed sample stream: profiling runs repeat exactly
const configs = [
  { id: 'glibc', label: 'glibc malloc (no preload)', env: {} },
  { id: 'mimalloc', label: 'plain mimalloc (LD_PRELOAD=libmimalloc.so)', env: { LD_PRELOAD: mimalloc } },
  { id: 'forward', label: 'forwarding-only interposer (bench/forward.c)', env: { LD_PRELOAD: forward } },
  { id: 'stopped', label: 'mimalloc-pprof armed, stopped', env: { LD_PRELOAD: preload } },
  {
    id: 'profiling',
    label: 'mimalloc-pprof profiling (512 KiB interval)',
    env: { LD_PRELOAD: preload, MIMALLOC_PROF: '1', ...SEED },
  },
  {
    id: 'profiling-4k',
    label: 'mimalloc-pprof profiling (4 KiB interval)',
    env: { LD_PRELOAD: preload, MIMALLOC_PROF: '1', MIMALLOC_PROF_SAMPLE_INTERVAL: '4096', ...SEED },
  },
];
// The workload's own loop (PRNG, ring indexing, call sites) without allocator calls.
const loopConfig = { id: 'loop', label: 'workload loop alone (no allocator calls)', env: {}, extraArgs: ['--no-alloc'] };

/** The environment minus anything that would change what the allocator does. */
function cleanEnv(extra) {
  const env = Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !k.startsWith('MIMALLOC_') && k !== 'LD_PRELOAD' && !k.startsWith('VALGRIND')),
  );
  return { ...env, ...extra };
}

const work = mkdtempSync(join(tmpdir(), 'mpp-callgrind-'));
process.on('exit', () => rmSync(work, { recursive: true, force: true }));

function totalIr(file) {
  const text = readFileSync(file, 'utf8');
  const m = /^(?:summary|totals):\s+(\d+)/m.exec(text);
  if (!m) die(`no summary/totals line in ${file}`);
  return Number(m[1]);
}

/** Self Ir by function, from callgrind_annotate: key "function (file, object)". */
function functions(file) {
  const out = new Map();
  const objects = new Map(); // object -> Ir
  if (!haveAnnotate) return { fns: out, objects };
  const r = sh('callgrind_annotate', ['--threshold=100', '--inclusive=no', '--auto=no', file]);
  if (r.status !== 0) die(`callgrind_annotate ${file} failed: ${r.stderr}`);
  let listing = false;
  for (const line of r.stdout.split('\n')) {
    if (/^Ir\s+file:function/.test(line)) {
      listing = true;
      continue;
    }
    if (!listing || /^-+$/.test(line)) continue;
    if (line.trim() === '') {
      if (out.size > 0) break; // the listing ends at its first blank line
      continue;
    }
    const m = /^\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(.*?)(?:\s+\[([^\]]+)\])?\s*$/.exec(line);
    if (!m) continue;
    const ir = Number(m[1].replaceAll(',', ''));
    const where = m[2];
    const colon = where.lastIndexOf(':');
    const fn = colon >= 0 ? where.slice(colon + 1) : where;
    const src = colon >= 0 ? where.slice(0, colon) : '???';
    const obj = m[3] ? basename(m[3]) : '';
    objects.set(obj || '?', (objects.get(obj || '?') ?? 0) + ir);
    const key = `${fn} (${src === '???' ? '' : basename(src) + ', '}${obj || '?'})`;
    out.set(key, (out.get(key) ?? 0) + ir);
  }
  return { fns: out, objects };
}

function callgrind(config, n) {
  const outFile = join(work, `${config.id}.${n}.out`);
  const argv = ['--tool=callgrind', '-q', `--callgrind-out-file=${outFile}`, pairs, String(n), ...(config.extraArgs ?? [])];
  const r = sh('valgrind', argv, { env: cleanEnv(config.env), cwd: work });
  if (r.status !== 0) die(`valgrind ${argv.join(' ')} (${config.id}) exited with ${r.status}:\n${r.stderr}`);
  return { ir: totalIr(outFile), ...functions(outFile) };
}

const round = (x, digits = 2) => Math.round(x * 10 ** digits) / 10 ** digits;

function measure(config) {
  note(`callgrind: ${config.label}: N = ${N1}, ${N2}`);
  const a = callgrind(config, N1);
  const b = callgrind(config, N2);
  const perPair = (b.ir - a.ir) / (N2 - N1);
  const byFunction = [];
  for (const key of new Set([...a.fns.keys(), ...b.fns.keys()])) {
    const d = ((b.fns.get(key) ?? 0) - (a.fns.get(key) ?? 0)) / (N2 - N1);
    if (d !== 0) byFunction.push({ function: key, perPair: d });
  }
  byFunction.sort((x, y) => y.perPair - x.perPair);
  const byObject = {};
  for (const obj of new Set([...a.objects.keys(), ...b.objects.keys()])) {
    const d = ((b.objects.get(obj) ?? 0) - (a.objects.get(obj) ?? 0)) / (N2 - N1);
    if (d !== 0) byObject[obj] = d;
  }
  const objects = [...b.objects.keys()].filter((o) => o !== '?' && b.objects.get(o) > 0).sort();
  return { id: config.id, label: config.label, env: config.env, ir: { n1: a.ir, n2: b.ir }, perPair, byObject, byFunction, objects };
}

const results = configs.map(measure);
const loop = measure(loopConfig);
const byId = Object.fromEntries(results.map((r) => [r.id, r]));
const plain = byId.mimalloc;

// A configuration whose preload did not take effect would silently measure something else.
const mimallocObject = basename(mimalloc);
const preloadObject = basename(preload);
const expectObject = (r, obj, present) => {
  if (!haveAnnotate) return;
  if (r.objects.includes(obj) !== present) {
    die(`${r.label}: ${obj} ${present ? 'absent from' : 'present in'} the run (objects: ${r.objects.join(', ')})`);
  }
};
expectObject(byId.glibc, mimallocObject, false);
expectObject(byId.mimalloc, mimallocObject, true);
expectObject(byId.mimalloc, preloadObject, false);
expectObject(byId.forward, basename(forward), true);
expectObject(byId.forward, mimallocObject, true);
for (const id of ['stopped', 'profiling', 'profiling-4k']) expectObject(byId[id], preloadObject, true);

/** Functions whose Ir per pair differ from plain mimalloc's, largest first. */
function extraWhere(r, limit = 8) {
  const base = new Map(plain.byFunction.map((f) => [f.function, f.perPair]));
  const rows = new Map(r.byFunction.map((f) => [f.function, f.perPair]));
  const keys = new Set([...base.keys(), ...rows.keys()]);
  const diff = [...keys]
    .map((k) => ({ function: k, extraPerPair: round((rows.get(k) ?? 0) - (base.get(k) ?? 0), 3) }))
    .filter((d) => Math.abs(d.extraPerPair) >= 0.005);
  diff.sort((x, y) => Math.abs(y.extraPerPair) - Math.abs(x.extraPerPair));
  return diff.slice(0, limit);
}

/** Ir per pair by object (shared library or executable) minus plain mimalloc's. */
function extraByObject(r) {
  const out = {};
  for (const obj of new Set([...Object.keys(plain.byObject), ...Object.keys(r.byObject)])) {
    const d = round((r.byObject[obj] ?? 0) - (plain.byObject[obj] ?? 0), 3);
    if (Math.abs(d) >= 0.005) out[obj] = d;
  }
  return Object.fromEntries(Object.entries(out).sort((x, y) => Math.abs(y[1]) - Math.abs(x[1])));
}

for (const r of results) {
  r.ratio = r.perPair / plain.perPair;
  r.extraPerPair = r.perPair - plain.perPair;
  r.allocatorPerPair = r.perPair - loop.perPair;
  r.allocatorRatio = r.allocatorPerPair / (plain.perPair - loop.perPair);
  const explain = !['glibc', 'mimalloc'].includes(r.id);
  r.where = explain ? extraWhere(r) : [];
  r.whereByObject = explain ? extraByObject(r) : {};
}

// ---- machine ------------------------------------------------------------------------------------
function firstLine(cmd, argv) {
  const r = spawnSync(cmd, argv, { encoding: 'utf8' });
  return r.status === 0 ? (r.stdout || r.stderr).split('\n')[0].trim() : 'unknown';
}

function cpuModel() {
  try {
    const text = readFileSync('/proc/cpuinfo', 'utf8');
    return /^model name\s*:\s*(.*)$/m.exec(text)?.[1]?.trim() ?? /^(?:Hardware|CPU part)\s*:\s*(.*)$/m.exec(text)?.[1]?.trim() ?? 'unknown';
  } catch {
    return 'unknown';
  }
}

function mimallocVersion() {
  const r = sh(pairs, ['--mi-version'], { env: cleanEnv({ LD_PRELOAD: mimalloc }) });
  const v = Number((r.stdout ?? '').trim());
  if (!(v > 0)) return { number: 0, text: 'unknown' };
  return { number: v, text: `${Math.floor(v / 100)}.${Math.floor(v / 10) % 10}.${v % 10}` };
}

const version = mimallocVersion();
const machine = {
  arch: firstLine('uname', ['-m']),
  cpu: cpuModel(),
  kernel: firstLine('uname', ['-r']),
  mimalloc: { path: mimalloc, version: version.text, miVersion: version.number },
  valgrind: firstLine('valgrind', ['--version']),
  compiler: firstLine(process.env.CC || 'cc', ['--version']),
};
const date = new Date().toISOString().slice(0, 10);
const stopped = byId.stopped;
const target = {
  ratio: TARGET,
  stoppedRatio: stopped.ratio,
  met: stopped.ratio <= TARGET,
  budgetPerPair: (TARGET - 1) * plain.perPair,
  stoppedExtraPerPair: stopped.extraPerPair,
};

// ---- output -------------------------------------------------------------------------------------
const fmt = (x, d = 2) => x.toFixed(d);
const signed = (x, d = 2) => (x >= 0 ? '+' : '') + x.toFixed(d);

function verdict() {
  const s = `armed-but-stopped is ${fmt(stopped.ratio, 3)}× plain mimalloc (${signed(stopped.extraPerPair)} Ir/pair)`;
  if (target.met) return `${s}: within the ≤ ${TARGET}× target (budget ${fmt(target.budgetPerPair)} Ir/pair).`;
  return `${s}: misses the ≤ ${TARGET}× target by ${fmt(stopped.ratio - TARGET, 3)} (budget ${fmt(target.budgetPerPair)} Ir/pair, over by ${fmt(stopped.extraPerPair - target.budgetPerPair)}).`;
}

function textTable() {
  const rows = [['configuration', 'Ir/pair', '× mimalloc', 'extra Ir/pair', 'allocator-only ×']];
  for (const r of results) {
    rows.push([r.label, fmt(r.perPair), `${fmt(r.ratio, 3)}×`, r.id === 'mimalloc' ? '0' : signed(r.extraPerPair), `${fmt(r.allocatorRatio, 3)}×`]);
  }
  rows.push([loop.label, fmt(loop.perPair), '', '', '']);
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => r[i].length)));
  return rows.map((r) => r.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ').trimEnd()).join('\n');
}

function whereText(r, bullet) {
  if (!haveAnnotate) return [`${bullet}(callgrind_annotate missing: no per-function breakdown)`];
  const objects = Object.entries(r.whereByObject).map(([o, d]) => `${o} ${signed(d, 3)}`);
  return [
    `${bullet}by object: ${objects.join(', ') || 'none'}`,
    ...r.where.map((w) => `${bullet}${signed(w.extraPerPair, 3).padStart(8)}  ${w.function}`),
  ];
}

if (json) {
  console.log(
    JSON.stringify(
      {
        n1: N1,
        n2: N2,
        quick,
        date,
        command: quick ? 'node bench/callgrind.mjs --quick --json' : COMMAND,
        machine,
        preload,
        workload: pairs,
        configurations: results,
        loop: { label: loop.label, perPair: loop.perPair, ir: loop.ir },
        target,
      },
      null,
      2,
    ),
  );
} else {
  console.log(`\ncallgrind instructions (Ir) per malloc/free pair, 16-64 B, ring of 256; N = ${N1} and ${N2}\n`);
  console.log(textTable());
  console.log(`\n${verdict()}`);
  console.log('(allocator-only × subtracts the loop row from both sides; the target is on the plain ratio.)');
  for (const id of ['stopped', 'profiling', 'profiling-4k']) {
    console.log(`\nwhere ${byId[id].label} spends its extra Ir/pair (self cost by function, vs plain mimalloc):`);
    console.log(whereText(byId[id], '  ').join('\n'));
  }
  console.log(
    `\n${machine.arch}, ${machine.cpu}; mimalloc ${machine.mimalloc.version} (${machine.mimalloc.path}); ${machine.valgrind}; ${date}`,
  );
}

// ---- bench/README.md ------------------------------------------------------------------------------
if (write) {
  if (quick) die('--write records full runs only; drop --quick');
  const md = [];
  md.push(BEGIN);
  md.push(`Measured ${date} with \`${COMMAND}\` (\`node bench/callgrind.mjs --write\`); N = ${N1.toLocaleString('en-US')} and ${N2.toLocaleString('en-US')} iterations.`);
  md.push('');
  md.push('| configuration | Ir/pair | × plain mimalloc | extra Ir/pair | allocator-only × |');
  md.push('|---|---:|---:|---:|---:|');
  for (const r of results) {
    md.push(`| ${r.label} | ${fmt(r.perPair)} | ${fmt(r.ratio, 3)}× | ${r.id === 'mimalloc' ? '0' : signed(r.extraPerPair)} | ${fmt(r.allocatorRatio, 3)}× |`);
  }
  md.push(`| ${loop.label} | ${fmt(loop.perPair)} | | | |`);
  md.push('');
  md.push(`**${verdict()}**`);
  md.push('');
  md.push('Where the extra instructions go (self Ir per pair by function, minus plain mimalloc\'s):');
  md.push('');
  for (const id of ['stopped', 'profiling', 'profiling-4k']) {
    md.push(`- ${byId[id].label}:`);
    md.push('');
    md.push('  ```');
    for (const line of whereText(byId[id], '  ')) md.push(line);
    md.push('  ```');
  }
  md.push('');
  md.push(`Machine: \`${machine.arch}\`, ${machine.cpu}, Linux ${machine.kernel}; mimalloc ${machine.mimalloc.version} (\`${machine.mimalloc.path}\`, mi_version() = ${machine.mimalloc.miVersion}); ${machine.valgrind}; workload built with ${machine.compiler}, \`-O2\`.`);
  md.push(END);
  const block = md.join('\n');
  const text = existsSync(readme) ? readFileSync(readme, 'utf8') : '';
  const b = text.indexOf(BEGIN);
  const e = text.indexOf(END);
  let next;
  if (b >= 0 && e > b) next = text.slice(0, b) + block + text.slice(e + END.length);
  else next = `${text}${text.endsWith('\n') || text === '' ? '' : '\n'}\n${block}\n`;
  writeFileSync(readme, next);
  note(`bench/callgrind: figures written to ${readme}`);
}
