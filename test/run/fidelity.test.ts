/**
 * `run` is invisible to the program it runs: signals end it as they would without `run`
 * (status 128+N, a profile still written), the program's own handlers keep working, Ctrl-C
 * reaches it once, a killed `run` takes its program with it and leaves no files, and errors
 * are the shell's (126, 127) or found before the program starts (--out).
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, copyFileSync, cpSync, existsSync, mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { gunzipSync } from 'node:zlib';

import { Profile } from '../../src/profile/pprof.js';

import { root, run, tempDir } from '../helpers.js';

const cli = join(root, 'dist', 'src', 'cli', 'bin.js');

/** The in-use bytes of the samples whose stack names `fn` (any fn when omitted). */
function inuseOf(path: string, fn?: string): number {
  const p = Profile.decode(gunzipSync(readFileSync(path)));
  const str = (i: number | bigint) => p.stringTable.strings[Number(i)] ?? '';
  const col = p.sampleType.findIndex((t) => str(t.type) === 'inuse_space');
  const fnName = new Map(p.function.map((f) => [Number(f.id), str(f.name)]));
  const loc = new Map(p.location.map((l) => [Number(l.id), l]));
  let total = 0;
  for (const s of p.sample) {
    const names = s.locationId.flatMap((id) => loc.get(Number(id))?.line.map((l) => fnName.get(Number(l.functionId))) ?? []);
    if (fn === undefined || names.includes(fn)) total += Number(s.value[col]);
  }
  return total;
}

interface Started {
  child: ChildProcess;
  stdout: () => string;
  stderr: () => string;
  ended: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** `run` in its own process group (as a shell starts a foreground job), once CMD printed "ready". */
async function startRun(args: string[], cwd: string, env: NodeJS.ProcessEnv = process.env): Promise<Started> {
  const child = spawn(process.execPath, [cli, 'run', ...args], { cwd, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stderr!.on('data', (d) => (err += d));
  // A run that does not end within 30 s fails the test (and is killed by its finally).
  const ended = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((done, fail) => {
    child.on('exit', (code, signal) => done({ code, signal }));
    setTimeout(() => fail(new Error(`run did not end within 30 s of the test's start: ${err}`)), 30_000).unref();
  });
  ended.catch(() => undefined);
  await new Promise<void>((ready, fail) => {
    const timer = setTimeout(() => fail(new Error(`not ready after 60 s: ${err}`)), 60_000);
    child.stdout!.on('data', (d) => {
      out += d;
      if (out.includes('ready')) {
        clearTimeout(timer);
        ready();
      }
    });
    ended.then(() => fail(new Error(`run ended before CMD was ready: ${err}`)), () => undefined);
  });
  return { child, stdout: () => out, stderr: () => err, ended };
}

/** Ends a test's run whatever happened (a failing assertion must not leave a busy loop). */
function killGroup(s: Started): void {
  try {
    process.kill(-s.child.pid!, 'SIGKILL');
  } catch {
    /* gone */
  }
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

async function waitFor(what: string, ok: () => boolean, ms = 10_000): Promise<void> {
  const until = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > until) throw new Error(`${what}: not after ${ms} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** A Node program that holds 25 MiB of Buffers under hold8() and then spins: no JavaScript
 * runs after it. */
const BUSY_NODE = "function hold8(){globalThis.k=[];for(let i=0;i<25;i++)globalThis.k.push(Buffer.alloc(1<<20,1))} hold8(); console.log('ready'); for(;;){}";

function cProgram(dir: string, name: string, body: string): string {
  const src = join(dir, `${name}.c`);
  writeFileSync(
    src,
    '#include <signal.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n#include <unistd.h>\n' +
      '__attribute__((noinline)) void hold8(void){static void* volatile p; p = malloc(8<<20); memset(p, 1, 4096);}\n' +
      body,
  );
  const bin = join(dir, name);
  const cc = run('cc', ['-g', '-O1', src, '-o', bin]);
  assert.equal(cc.status, 0, cc.stderr);
  return bin;
}

/** What the working directory and /tmp hold of the run afterwards, beyond `expected`. */
function leftovers(dir: string, expected: string[], pids: number[]): string[] {
  const extra = readdirSync(dir).filter((f) => !expected.includes(f));
  for (const pid of pids) if (existsSync(`/tmp/perf-${pid}.map`)) extra.push(`/tmp/perf-${pid}.map`);
  return extra;
}

describe('signals end the program as they would without run, and the profile is written', () => {
  test('Ctrl-C (SIGINT to the foreground group) ends a busy Node program: status 130, its 8 MiB in the profile, nothing left behind', async () => {
    const dir = tempDir();
    const s = await startRun(['--interval', '64k', '--out', 'int.pb.gz', '--', 'node', '-e', BUSY_NODE], dir);
    try {
      process.kill(-s.child.pid!, 'SIGINT'); // run and node both receive it, as from a terminal
      const { code } = await s.ended;
      assert.equal(code, 130, s.stderr());
      assert.ok(inuseOf(join(dir, 'int.pb.gz'), 'hold8') >= 20 << 20, s.stderr());
      assert.deepEqual(leftovers(dir, ['int.pb.gz'], []), []);
      assert.doesNotMatch(s.stderr(), /internal error|did .* end by/);
    } finally {
      killGroup(s);
    }
  });

  test('SIGTERM to run ends a busy Node program by SIGTERM (143), profile written', async () => {
    const dir = tempDir();
    const s = await startRun(['--interval', '64k', '--out', 'term.pb.gz', '--', 'node', '-e', BUSY_NODE], dir);
    try {
      s.child.kill('SIGTERM');
      assert.equal((await s.ended).code, 143, s.stderr());
      assert.ok(inuseOf(join(dir, 'term.pb.gz'), 'hold8') >= 20 << 20, s.stderr());
    } finally {
      killGroup(s);
    }
  });

  test('SIGHUP and SIGQUIT to run end a C program by that signal (129, 131), profile written', async () => {
    const dir = tempDir();
    const bin = cProgram(dir, 'waiter', 'int main(void){hold8(); puts("ready"); fflush(stdout); for(;;) pause();}\n');
    for (const [signal, status] of [['SIGHUP', 129], ['SIGQUIT', 131]] as const) {
      const out = `${signal}.pb.gz`;
      const s = await startRun(['--interval', '64k', '--out', out, '--', bin], dir);
      try {
        s.child.kill(signal);
        assert.equal((await s.ended).code, status, `${signal}: ${s.stderr()}`);
        assert.ok(inuseOf(join(dir, out), 'hold8') >= 4 << 20, `${signal}: ${s.stderr()}`);
      } finally {
        killGroup(s);
      }
    }
  });

  test('a Node program that SIGTERMs itself ends by SIGTERM (143), as without run', () => {
    const dir = tempDir();
    const r = spawnSync(process.execPath, [cli, 'run', '--out', 'self.pb.gz', '--', 'node', '-e', "process.kill(process.pid, 'SIGTERM'); setTimeout(()=>{}, 5000)"], {
      cwd: dir,
      encoding: 'utf8',
      timeout: 60_000,
    });
    const plain = spawnSync('node', ['-e', "process.kill(process.pid, 'SIGTERM'); setTimeout(()=>{}, 5000)"], { timeout: 60_000 });
    assert.equal(plain.signal, 'SIGTERM', 'control: without run the program ends by SIGTERM');
    assert.equal(r.status, 143, r.stderr);
    assert.ok(existsSync(join(dir, 'self.pb.gz')), r.stderr);
  });

  test("the program's own SIGINT handler runs (and decides the status); the exit profile is written", async () => {
    const dir = tempDir();
    const program = "process.on('SIGINT', () => { console.log('handled'); process.exit(3); }); console.log('ready'); setInterval(() => {}, 1000);";
    const s = await startRun(['--interval', '64k', '--out', 'own.pb.gz', '--', 'node', '-e', program], dir);
    try {
      s.child.kill('SIGINT');
      assert.equal((await s.ended).code, 3, s.stderr());
      assert.match(s.stdout(), /handled/);
      assert.ok(existsSync(join(dir, 'own.pb.gz')), s.stderr());
    } finally {
      killGroup(s);
    }
  });

  test('Ctrl-C reaches the program once although run also passes SIGINT on (and a SIGINT sent to run alone still arrives)', async () => {
    const dir = tempDir();
    // Counts SIGINTs for a second after the first, then exits with the count.
    const bin = cProgram(
      dir,
      'counter',
      'static volatile sig_atomic_t n;\nstatic void on_int(int s){(void)s; n++;}\n' +
        'int main(void){signal(SIGINT, on_int); hold8(); puts("ready"); fflush(stdout);\n' +
        '  while(n == 0) pause(); sleep(1); return n;}\n',
    );
    const group = await startRun(['--out', 'group.pb.gz', '--', bin], dir);
    try {
      process.kill(-group.child.pid!, 'SIGINT');
      assert.equal((await group.ended).code, 1, `one SIGINT counted: ${group.stderr()}`);
    } finally {
      killGroup(group);
    }
    const alone = await startRun(['--out', 'alone.pb.gz', '--', bin], dir);
    try {
      alone.child.kill('SIGINT');
      assert.equal((await alone.ended).code, 1, `forwarded: ${alone.stderr()}`);
    } finally {
      killGroup(alone);
    }
    // positive control: two SIGINTs from elsewhere within the window are both delivered
    const twice = await startRun(['--out', 'twice.pb.gz', '--', bin], dir);
    try {
      const pid = findChild(twice.child.pid!);
      process.kill(pid, 'SIGINT');
      await new Promise((r) => setTimeout(r, 20));
      process.kill(pid, 'SIGINT');
      assert.equal((await twice.ended).code, 2, `control: ${twice.stderr()}`);
    } finally {
      killGroup(twice);
    }
  });

  test('the closing line names how a program without a profile ended (SIGSEGV here), status 139', () => {
    const dir = tempDir();
    const r = spawnSync(process.execPath, [cli, 'run', '--', 'node', '-e', "process.kill(process.pid, 'SIGSEGV')"], { cwd: dir, encoding: 'utf8', timeout: 60_000 });
    assert.equal(r.status, 139, r.stderr);
    assert.match(r.stderr, /no profile was written: node was ended by SIGSEGV \(a crash/);
    assert.doesNotMatch(r.stderr, /SIGKILL/);
  });
});

/** The pid of `run`'s child (the program), from /proc. */
function findChild(runPid: number): number {
  const kids = readFileSync(`/proc/${runPid}/task/${runPid}/children`, 'utf8').trim().split(/\s+/).map(Number);
  const program = kids.find((k) => !readFileSync(`/proc/${k}/cmdline`, 'utf8').includes('mimalloc-pprof-watchdog'));
  assert.ok(program !== undefined, `run ${runPid} has a program child: ${kids.join(' ')}`);
  return program;
}

describe('a killed run takes its program with it and leaves nothing', () => {
  test('SIGKILL to run: the Node program dies, the run folder and the perf map are removed', async () => {
    const dir = tempDir();
    const before = new Set(readdirSync(tmpdir()).filter((f) => f.startsWith('mimalloc-pprof-run-')));
    const s = await startRun(['--out', 'killed.pb.gz', '--', 'node', '-e', BUSY_NODE], dir);
    try {
      const program = findChild(s.child.pid!);
      const runDirs = readdirSync(tmpdir()).filter((f) => f.startsWith('mimalloc-pprof-run-') && !before.has(f));
      assert.equal(runDirs.length, 1, runDirs.join(' '));
      assert.ok(existsSync(`/tmp/perf-${program}.map`), 'control: the program has a perf map while it runs');
      s.child.kill('SIGKILL');
      await s.ended;
      await waitFor('the program dies with run', () => !alive(program) || readFileSync(`/proc/${program}/stat`, 'utf8').includes(') Z'));
      await waitFor('the watchdog removes the run folder and the perf map', () => !existsSync(join(tmpdir(), runDirs[0]!)) && !existsSync(`/tmp/perf-${program}.map`));
      assert.deepEqual(leftovers(dir, [], []), []);
    } finally {
      killGroup(s);
    }
  });
});

describe("errors are found before the program runs, with a shell's statuses", () => {
  test('--out in a missing folder: status 2 and one line, and the program never started', () => {
    const dir = tempDir();
    const r = spawnSync(process.execPath, [cli, 'run', '--out', join(dir, 'missing', 'p.pb.gz'), '--', 'touch', join(dir, 'ran')], { encoding: 'utf8' });
    assert.equal(r.status, 2, r.stderr);
    assert.match(r.stderr, /--out .*: the folder .*missing does not exist/);
    assert.equal(existsSync(join(dir, 'ran')), false, 'the program did not run');
    const ok = spawnSync(process.execPath, [cli, 'run', '--out', join(dir, 'p.pb.gz'), '--', 'touch', join(dir, 'ran')], { encoding: 'utf8' });
    assert.equal(ok.status, 0, `control: a writable folder runs it: ${ok.stderr}`);
    assert.ok(existsSync(join(dir, 'ran')));
  });

  test('a command that is not executable gives 126, one that does not exist 127, as sh does', () => {
    const dir = tempDir();
    const plain = join(dir, 'not-executable');
    writeFileSync(plain, 'echo hi\n');
    chmodSync(plain, 0o644);
    const r = spawnSync(process.execPath, [cli, 'run', '--', plain], { encoding: 'utf8' });
    const sh = spawnSync('sh', ['-c', `'${plain}'`]);
    assert.equal(sh.status, 126, 'control: the shell says 126');
    assert.equal(r.status, 126, r.stderr);
    assert.match(r.stderr, /permission denied/);
    assert.doesNotMatch(r.stderr, /internal error/);
    const missing = spawnSync(process.execPath, [cli, 'run', '--', 'no-such-command-here'], { encoding: 'utf8' });
    assert.equal(missing.status, 127, missing.stderr);
  });
});

describe('paths and working directories', () => {
  test('an install path and a working directory with spaces and quotes: the program runs unchanged and is profiled', () => {
    const base = join(tempDir(), 'My Projects', "mimalloc pprof's");
    mkdirSync(base, { recursive: true });
    cpSync(join(root, 'dist'), join(base, 'dist'), { recursive: true });
    copyFileSync(join(root, 'package.json'), join(base, 'package.json'));
    symlinkSync(join(root, 'node_modules'), join(base, 'node_modules'));
    symlinkSync(join(root, 'build'), join(base, 'build'));
    const env = { ...process.env };
    if (env.MIMALLOC_PPROF_LIB) {
      // another build under test (mimalloc 3): reached through the spaced path too
      copyFileSync(env.MIMALLOC_PPROF_LIB, join(base, 'lib under test.so'));
      env.MIMALLOC_PPROF_LIB = join(base, 'lib under test.so');
    }
    const spacedLib = env.MIMALLOC_PPROF_LIB ?? join(base, 'build', 'libmimalloc-pprof.so');
    const plain = spawnSync(process.execPath, ['-e', 'console.log(1)'], { env: { ...process.env, LD_PRELOAD: spacedLib }, encoding: 'utf8' });
    assert.match(plain.stderr, /cannot be preloaded/, 'control: LD_PRELOAD alone splits the path on its space');
    const dir = join(tempDir(), 'work dir "x"');
    mkdirSync(dir);
    writeFileSync(join(dir, 'app.mjs'), "function hold8(){globalThis.k=Buffer.allocUnsafeSlow(8<<20)} hold8(); console.log('ok')\n");
    const r = spawnSync(
      process.execPath,
      [join(base, 'dist', 'src', 'cli', 'bin.js'), 'run', '--interval', '64k', '--out', 'space.pb.gz', '--', 'node', 'app.mjs'],
      { cwd: dir, env, encoding: 'utf8', timeout: 60_000 },
    );
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.stdout.trim(), 'ok');
    assert.doesNotMatch(r.stderr, /MODULE_NOT_FOUND|Cannot find module|did not take effect|static or setuid/);
    assert.ok(inuseOf(join(dir, 'space.pb.gz'), 'hold8') >= 4 << 20, r.stderr);
    assert.deepEqual(leftovers(dir, ['app.mjs', 'space.pb.gz'], []), []);
  });

  test('a Node child with another working directory leaves no V8 log there', () => {
    const dir = tempDir();
    const sub = join(dir, 'sub');
    mkdirSync(sub);
    const parent = `require('node:child_process').execFileSync(process.execPath, ['-e', 'globalThis.k=Buffer.alloc(1<<20)'], { cwd: ${JSON.stringify(sub)}, stdio: 'inherit' })`;
    const r = spawnSync(process.execPath, [cli, 'run', '--top', '0', '--out', 'tree.pb.gz', '--', 'node', '-e', parent], { cwd: dir, encoding: 'utf8', timeout: 60_000 });
    assert.equal(r.status, 0, r.stderr);
    assert.deepEqual(readdirSync(sub), []);
    assert.deepEqual(readdirSync(dir).filter((f) => f.startsWith('isolate-')), []);
  });
});

describe('the exit profile of a Node process shows what is retained', () => {
  // 8 MiB that the program keeps and 8 MiB it dropped; nothing in between triggers a collection
  const program =
    'function hold8(){globalThis.k=Buffer.allocUnsafeSlow(8<<20)} function drop8(){let g=Buffer.allocUnsafeSlow(8<<20); g[0]=1; g=null} hold8(); drop8();';
  const profileOf = (extra: string[]) => {
    const dir = tempDir();
    const r = spawnSync(process.execPath, [cli, 'run', ...extra, '--interval', '64k', '--top', '0', '--out', 'gc.pb.gz', '--', 'node', '-e', program], {
      cwd: dir,
      encoding: 'utf8',
      timeout: 60_000,
    });
    assert.equal(r.status, 0, r.stderr);
    return { held: inuseOf(join(dir, 'gc.pb.gz'), 'hold8'), dropped: inuseOf(join(dir, 'gc.pb.gz'), 'drop8') };
  };

  test('a full collection runs before the dump: dropped Buffers are gone, kept ones stay', () => {
    const { held, dropped } = profileOf([]);
    assert.ok(held >= 6 << 20, `kept: ${held}`);
    assert.equal(dropped, 0);
  });

  // with the JavaScript heap on, the collection is the one V8's sampling-profile read starts
  // with (src/node/exit-hook.cts); without it, the hook's own
  test('the same with --no-js-heap (the exit hook collects by itself)', () => {
    const { held, dropped } = profileOf(['--no-js-heap']);
    assert.ok(held >= 6 << 20, `kept: ${held}`);
    assert.equal(dropped, 0);
  });

  test('positive control: --no-gc shows the dropped Buffer too', () => {
    const { held, dropped } = profileOf(['--no-gc']);
    assert.ok(held >= 6 << 20, `kept: ${held}`);
    assert.ok(dropped >= 6 << 20, `dropped: ${dropped}`);
  });
});

describe('process trees: who each process was, the one that held the most in use detailed', () => {
  const comments = (path: string) => {
    const p = Profile.decode(gunzipSync(readFileSync(path)));
    return p.comment.map((c) => p.stringTable.strings[Number(c)] ?? '');
  };

  test('each profile records its pid, parent and command line; one summary line per process', () => {
    const dir = tempDir();
    const parent =
      "const {execFileSync}=require('node:child_process');" +
      "execFileSync(process.execPath,['-e','function big(){globalThis.k=Buffer.alloc(16<<20, 1)} big()', 'child-marker'],{stdio:'inherit'});";
    const r = spawnSync(process.execPath, [cli, 'run', '--interval', '64k', '--out', 'tree.pb.gz', '--', 'node', '-e', parent], { cwd: dir, encoding: 'utf8', timeout: 60_000 });
    assert.equal(r.status, 0, r.stderr);
    const files = readdirSync(dir).filter((f) => f.endsWith('.pb.gz')).sort();
    assert.equal(files.length, 2, files.join(' '));
    const mainPid = Number(/pid=(\d+)$/.exec(comments(join(dir, 'tree.pb.gz')).find((c) => c.includes(' run: '))!)![1]);
    const childFile = files.find((f) => f !== 'tree.pb.gz')!;
    const child = comments(join(dir, childFile));
    assert.ok(child.includes(`ppid=${mainPid}`), child.join(' | '));
    assert.ok(child.some((c) => c.startsWith('command: ') && c.includes('child-marker')), child.join(' | '));
    assert.ok(comments(join(dir, 'tree.pb.gz')).some((c) => c.startsWith('command: node -e ')));
    // the summary: two processes, the child (16 MiB more resident at its peak) detailed, the
    // main one marked m
    assert.match(r.stderr, /mimalloc-pprof: 2 processes/);
    const lines = r.stderr.split('\n').filter((l) => /^[*m ] +\d+ +(\d+|\?) +/.test(l));
    assert.equal(lines.length, 2, r.stderr);
    // the child's line (its command line cut at 100 characters: by the node's path's length, the marker may be gone)
    const childPid = Number(/pid=(\d+)$/.exec(child.find((c) => c.includes(' run: '))!)![1]);
    assert.match(lines.find((l) => l.startsWith('*'))!, new RegExp(`^\\* +${childPid} +${mainPid} `));
    assert.match(lines.find((l) => l.startsWith('m'))!, new RegExp(`^m +${mainPid} `));
    assert.match(r.stderr, /in-use memory of node \(pid \d+\) at exit[\s\S]*big/);
    // node's frames are named (its first segment, 8 KiB of stubs, has none of them): no claim
    // that it is stripped, which a stripped binary does get (the Deno test below)
    assert.doesNotMatch(r.stderr, /node has no symbol table/);
  });

  test('a child that forks without exec is profiled and listed with its parent', () => {
    const dir = tempDir();
    const bin = cProgram(
      dir,
      'forker',
      '#include <sys/wait.h>\n' +
        '__attribute__((noinline)) static void in_child(void){static void* volatile q; q = malloc(6<<20); memset(q, 2, 4096);}\n' +
        'int main(void){hold8(); pid_t c = fork(); if (c == 0) { in_child(); exit(0); } int st; waitpid(c, &st, 0); return WEXITSTATUS(st);}\n',
    );
    const r = spawnSync(process.execPath, [cli, 'run', '--interval', '64k', '--out', 'f.pb.gz', '--', bin], { cwd: dir, encoding: 'utf8', timeout: 60_000 });
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stderr, /mimalloc-pprof: 2 processes/);
    const child = readdirSync(dir).find((f) => /^f\.\d+\.pb\.gz$/.test(f));
    assert.ok(child, r.stderr);
    assert.ok(inuseOf(join(dir, child), 'in_child') >= 5 << 20);
  });

  test('run -- npx tsc: tsc is started directly and is the process detailed, npx never', () => {
    const dir = tempDir();
    symlinkSync(join(root, 'node_modules'), join(dir, 'node_modules'));
    writeFileSync(join(dir, 'tsconfig.json'), JSON.stringify({ compilerOptions: { strict: true, outDir: 'out', target: 'es2022', module: 'nodenext' }, include: ['a.ts'] }));
    writeFileSync(join(dir, 'a.ts'), 'export const answer: number = 42;\n');
    const r = spawnSync(process.execPath, [cli, 'run', '--top', '3', '--out', 'tsc.pb.gz', '--', 'npx', '--no-install', 'tsc', '-p', '.'], { cwd: dir, encoding: 'utf8', timeout: 120_000 });
    assert.equal(r.status, 0, r.stderr);
    // run follows npx to the program it would start (src/run: npx and npm exec)
    assert.match(r.stderr, /npx --no-install tsc: started \S*node_modules\/\.bin\/tsc directly/, r.stderr);
    assert.match(r.stderr, /\(top level\) \S*typescript\/lib\/_?tsc\.js:1/, 'the profile detailed is tsc\'s');
    // where there are several processes after all, the one detailed is tsc, never npx
    const detailed = r.stderr.split('\n').find((l) => /^\* +\d+ +(\d+|\?) +/.test(l));
    if (detailed !== undefined) assert.doesNotMatch(detailed, /npx/, 'not npx itself');
    assert.ok(existsSync(join(dir, 'out', 'a.js')), 'tsc did its work');
  });

  test('--main-only: only the process run started is profiled (through a #! env wrapper too); its children get the NODE_OPTIONS run was given', () => {
    const dir = tempDir();
    const parent =
      "const {execFileSync}=require('node:child_process');" +
      "execFileSync(process.execPath,['-e','console.log(JSON.stringify({opts: process.env.NODE_OPTIONS ?? null}))'],{stdio:'inherit'});";
    const r = spawnSync(process.execPath, [cli, 'run', '--main-only', '--out', 'main.pb.gz', '--', 'node', '-e', parent], { cwd: dir, encoding: 'utf8', timeout: 60_000, env: { ...process.env, NODE_OPTIONS: '--no-warnings' } });
    assert.equal(r.status, 0, r.stderr);
    assert.deepEqual(JSON.parse(r.stdout.trim()), { opts: '--no-warnings' });
    assert.deepEqual(readdirSync(dir), ['main.pb.gz']);
    // a `#!/usr/bin/env node` script: env is the process run starts, node what it exec's
    const script = join(dir, 'tool');
    writeFileSync(script, `#!/usr/bin/env node\nfunction keepMain(){globalThis.k=Buffer.alloc(4<<20,1)} keepMain();\n${parent}\n`);
    chmodSync(script, 0o755);
    const viaEnv = spawnSync(process.execPath, [cli, 'run', '--main-only', '--interval', '64k', '--out', 'tool.pb.gz', '--', script], { cwd: dir, encoding: 'utf8', timeout: 60_000 });
    assert.equal(viaEnv.status, 0, viaEnv.stderr);
    assert.ok(inuseOf(join(dir, 'tool.pb.gz'), 'keepMain') >= 3 << 20, viaEnv.stderr);
    assert.deepEqual(readdirSync(dir).filter((f) => f.startsWith('tool.')), ['tool.pb.gz']);
    // a program that is not Node: its Node children get no Node options either
    const sh = spawnSync(process.execPath, [cli, 'run', '--main-only', '--out', 'sh.pb.gz', '--', 'bash', '-c', `"${process.execPath}" -e 'console.log(process.env.NODE_OPTIONS ?? "none")'; true`], { cwd: dir, encoding: 'utf8', timeout: 60_000 });
    assert.equal(sh.status, 0, sh.stderr);
    assert.equal(sh.stdout.trim(), 'none');
    assert.deepEqual(readdirSync(dir).filter((f) => f.endsWith('.pb.gz')).sort(), ['main.pb.gz', 'sh.pb.gz', 'tool.pb.gz']);
  });
});

describe('Deno (the deno npm package): profiled before its teardown, JavaScript named', () => {
  test('retained Uint8Arrays are under the allocating function within 4 sigma and 10 %, through the npm launcher', () => {
    const dir = tempDir();
    const size = 65536;
    const count = 800; // 50 MiB
    writeFileSync(
      join(dir, 'app.ts'),
      `const kept: Uint8Array[] = [];\nfunction retainArrays(): void { for (let i = 0; i < ${count}; i++) kept.push(new Uint8Array(${size}).fill(1)); }\nretainArrays();\n(globalThis as any).kept = kept;\nconsole.log('retained');\n`,
    );
    const deno = join(root, 'node_modules', '.bin', 'deno');
    const r = spawnSync(process.execPath, [cli, 'run', '--interval', '32k', '--seed', '3', '--out', 'deno.pb.gz', '--', deno, 'run', 'app.ts'], {
      cwd: dir,
      encoding: 'utf8',
      timeout: 120_000,
      env: { ...process.env, DENO_NO_UPDATE_CHECK: '1', DENO_DIR: join(dir, '.deno') },
    });
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.stdout.trim(), 'retained');
    const retained = size * count;
    const got = inuseOf(join(dir, 'deno.pb.gz'), 'retainArrays');
    // Horvitz-Thompson: each block's variance is s^2 (w - 1), w = 1/p, p = 1 - exp(-s/R)
    const w = 1 / (1 - Math.exp(-size / 32768));
    const sigma = Math.sqrt(count * size * size * (w - 1));
    assert.ok(4 * sigma <= 0.1 * retained, 'the workload supports a 10 % claim');
    assert.ok(Math.abs(got - retained) <= 4 * sigma, `${got} under retainArrays vs ${retained} (4 sigma ${(4 * sigma).toFixed(0)})`);
    assert.match(r.stderr, /retainArrays .*app\.ts:2/, 'the JavaScript table names it');
    assert.match(r.stderr, /deno has no symbol table \(stripped\): its own frames show as \[deno\]/);
    assert.deepEqual(readdirSync(dir).filter((f) => f !== '.deno').sort(), ['app.ts', 'deno.pb.gz']);
  });

  test('control: without the preload module (a Deno subcommand other than run) the exit dump misses the arrays', () => {
    const dir = tempDir();
    writeFileSync(join(dir, 'app.ts'), `const kept: Uint8Array[] = [];\nfunction retainArrays(): void { for (let i = 0; i < 800; i++) kept.push(new Uint8Array(65536).fill(1)); }\nretainArrays();\n(globalThis as any).kept = kept;\n`);
    const deno = join(root, 'node_modules', '.bin', 'deno');
    // `deno eval` gets no hook: Deno frees its memory before the preload's own exit dump
    const r = spawnSync(process.execPath, [cli, 'run', '--interval', '32k', '--out', 'eval.pb.gz', '--', deno, 'eval', readFileSync(join(dir, 'app.ts'), 'utf8').replace(/: Uint8Array\[\]|: void|as any/g, '').replace('(globalThis )', 'globalThis')], {
      cwd: dir,
      encoding: 'utf8',
      timeout: 120_000,
      env: { ...process.env, DENO_NO_UPDATE_CHECK: '1', DENO_DIR: join(dir, '.deno') },
    });
    assert.equal(r.status, 0, r.stderr);
    assert.ok(inuseOf(join(dir, 'eval.pb.gz')) < 8 << 20, 'the arrays are gone by the exit dump');
  });
});
