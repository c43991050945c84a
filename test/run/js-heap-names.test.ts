/**
 * One name per function across the two heaps (issue 29 (4)): under `run`, a function that keeps
 * both JavaScript objects and Buffers appears once, as one pprof function with its file and
 * line, with samples of both heaps beneath it; the JavaScript heap's tree starts at the
 * script's `(top level) file:1` as the native stacks do; the profiler's own work (the exit
 * hook's collection) is in neither. V8 has forgotten the url and line of a script that is dead
 * at exit (a CommonJS module's functions after it ran), so the JavaScript heap's frames are
 * named from the native stacks' (src/profile/js-heap.ts). The control,
 * MIMALLOC_PPROF_TEST_JS_HEAP_RAW=1, merges V8's frames as they come: the check must fail on
 * Node 20; from Node 22 on V8 keeps the dead script and the raw frames pass.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { Profile } from '../../src/profile/pprof.js';

import { mergeJsHeap, type V8SamplingHeapNode } from '../../src/profile/js-heap.js';
import { libraryPath } from '../../src/preload/library.js';
import { isJavaScriptName } from '../../src/symbolize/perfmap.js';
import { nodeMajor, root, tempDir } from '../helpers.js';
import { decode } from './decode.js';

const cli = join(root, 'dist', 'src', 'cli', 'bin.js');
const fixture = join(root, 'test', 'run', 'fixtures', 'js-heap-both.cjs');

interface Found {
  /** Functions named holdBoth that samples use (by file and line), with the heaps beneath each. */
  holdBoth: { id: number; file: string; line: number; heaps: Set<string> }[];
  /** The outermost JavaScript frame of every heap=js sample, as `name file:line`. */
  jsRoots: Set<string>;
  /** heap=js frames that carry no file. */
  jsUnplaced: Set<string>;
  /** heap=js frames of the profiler's own work. */
  own: Set<string>;
  /** The outermost JavaScript frame of every native sample that has one. */
  nativeRoots: Set<string>;
}

function examine(path: string): Found {
  const { profile, str } = decode(path);
  const fn = new Map(profile.function.map((f) => [Number(f.id), f]));
  const loc = new Map(profile.location.map((l) => [Number(l.id), l]));
  const heapKey = profile.stringTable.strings.indexOf('heap');
  const found: Found = { holdBoth: [], jsRoots: new Set(), jsUnplaced: new Set(), own: new Set(), nativeRoots: new Set() };
  // A frame without a file is the program's function whose script V8 dropped only where the
  // profile names that function with a file elsewhere (the native stacks do); V8's builtins
  // (Array.prototype.push growing `kept`, sampled now and then) have no script at all.
  const placedNames = new Set(profile.function.filter((f) => str(f.filename) !== '').map((f) => str(f.name)));
  placedNames.add('(anonymous)');
  for (const s of profile.sample) {
    const heap = str(s.label.find((l) => Number(l.key) === heapKey)?.str ?? 0);
    const frames = s.locationId.flatMap((id) => loc.get(Number(id))?.line.map((l) => fn.get(Number(l.functionId))!) ?? []);
    for (const f of frames) {
      if (str(f.name) === 'holdBoth') {
        // one function as pprof and the report show it: name, file and line (the native side
        // keeps one pprof function per tier of V8's code, all with the same three)
        let h = found.holdBoth.find((x) => x.file === str(f.filename) && x.line === Number(f.startLine));
        if (!h) found.holdBoth.push((h = { id: Number(f.id), file: str(f.filename), line: Number(f.startLine), heaps: new Set() }));
        h.heaps.add(heap);
      }
    }
    // the outermost JavaScript frame: a sample with the native stack where V8 took it
    // (src/profile/js-anchors.ts) goes on below it to the native roots, as native stacks do
    const jsFrames = frames.filter((f) => isJavaScriptName(str(f.systemName)));
    if (jsFrames.length === 0) continue;
    const outer = jsFrames[jsFrames.length - 1]!;
    const outerName = `${str(outer.name)} ${str(outer.filename)}:${Number(outer.startLine)}`;
    if (heap !== 'js') {
      found.nativeRoots.add(outerName);
      continue;
    }
    found.jsRoots.add(outerName);
    for (const f of frames) {
      if (str(f.filename) === '' && placedNames.has(str(f.name))) found.jsUnplaced.add(str(f.name));
      if (/\/dist\/src\//.test(str(f.filename)) || ['fullGc', 'createContext', 'runInNewContext'].includes(str(f.name))) found.own.add(str(f.name));
    }
  }
  return found;
}

function runFixture(env: Record<string, string> = {}): Found {
  const dir = tempDir('mpp-jsnames-');
  const out = join(dir, 'p.pb.gz');
  const r = spawnSync(process.execPath, [cli, 'run', '--top', '3', '--out', out, '--', 'node', fixture], { encoding: 'utf8', env: { ...process.env, ...env }, timeout: 60_000 });
  assert.equal(r.status, 0, r.stderr);
  return examine(out);
}

/** The acceptance check: one holdBoth, placed, with both heaps; roots and own work as said. */
function problems(f: Found): string[] {
  const p: string[] = [];
  if (f.holdBoth.length !== 1) p.push(`holdBoth is ${f.holdBoth.length} functions: ${JSON.stringify(f.holdBoth.map((h) => `${h.file}:${h.line} [${[...h.heaps]}]`))}`);
  const h = f.holdBoth[0];
  if (h && (h.file !== fixture || h.line !== 3)) p.push(`holdBoth is at ${h.file}:${h.line}`);
  if (h && !(h.heaps.has('js') && h.heaps.has('native'))) p.push(`holdBoth has only ${[...h.heaps]} beneath it`);
  // the script's top level; or Node's own frame that runs the exit event (`emit node:events`:
  // an object it allocates there, live while the listeners run, is sampled now and then)
  for (const r of f.jsRoots) if (!/^\(top level\) \S+:1$/.test(r) && !/^emit node:events:\d+$/.test(r)) p.push(`a JavaScript-heap root is ${r}`);
  if (f.jsUnplaced.size > 0) p.push(`JavaScript-heap frames without a file: ${[...f.jsUnplaced].join(', ')}`);
  if (f.own.size > 0) p.push(`the profiler's own work: ${[...f.own].join(', ')}`);
  return p;
}

test('a function that keeps JS objects and Buffers: one function, file:line, both heaps beneath it; JS roots (top level) file:1', () => {
  const f = runFixture();
  assert.deepEqual(problems(f), []);
});

test('control: V8 frames merged as they come (MIMALLOC_PPROF_TEST_JS_HEAP_RAW=1) fail the check', (t) => {
  // V8's stacks alone (no anchors), merged as they come
  const f = runFixture({ MIMALLOC_PPROF_TEST_JS_HEAP_RAW: '1', MIMALLOC_PPROF_JS_ANCHORS: '0' });
  const p = problems(f);
  t.diagnostic(`Node ${process.versions.node}, raw: ${p.length === 0 ? 'no problem' : p.join('; ')}`);
  if (nodeMajor >= 22) {
    // V8 12.4 on (Node 22, 24, 26) keeps a dead CommonJS module's script: its sampler's frames
    // come with url and line, and merged as they come they already pass (the naming from the
    // native stacks, and this control, matter on Node 20, which the suite runs first)
    // (raw also keeps the exit hook's own subtree when a sample lands in it: not a naming matter)
    const naming = p.filter((x) => /holdBoth is|without a file|root is \(anonymous\)/.test(x));
    assert.deepEqual(naming, [], `Node ${process.versions.node}: V8's heap sampler dropped the script of a dead module`);
    return;
  }
  assert.ok(p.length > 0, 'the check let two names for one function through');
  assert.ok(p.some((x) => /holdBoth is 2 functions|without a file|root is \(anonymous\)/.test(x)), p.join('\n'));
});

test("the profiler's own scripts are left out of the JavaScript heap (control: raw keeps them)", () => {
  const own = join(root, 'dist', 'src', 'node', 'exit-hook.cjs');
  const node = (id: number, functionName: string, url: string, line: number, selfSize: number, children: V8SamplingHeapNode[] = []): V8SamplingHeapNode => ({
    id, callFrame: { functionName, url, lineNumber: line, columnNumber: 0, scriptId: '1' }, selfSize, children,
  });
  const js = {
    head: node(1, '(root)', '', -1, 0, [
      node(2, 'emit', 'node:events', 10, 0, [node(3, 'dump', own, 70, 0, [node(4, 'fullGc', own, 24, 0, [node(5, 'createContext', 'node:vm', 100, 524288)])])]),
      node(6, 'app', '/srv/app.js', 4, 1 << 20),
    ]),
  };
  const fresh = () => {
    const p = new Profile();
    p.sampleType = [];
    for (const [t, u] of [['inuse_objects', 'count'], ['inuse_space', 'bytes']] as const) {
      p.sampleType.push(Object.assign(Object.create(Object.getPrototypeOf(p)), {}) as never);
      p.sampleType.pop();
      p.sampleType.push({ type: p.stringTable.dedup(t), unit: p.stringTable.dedup(u) } as never);
    }
    return p;
  };
  const merged = mergeJsHeap(fresh(), js, 524288);
  assert.equal(merged.bytes, 1 << 20);
  const prev = process.env.MIMALLOC_PPROF_TEST_JS_HEAP_RAW;
  process.env.MIMALLOC_PPROF_TEST_JS_HEAP_RAW = '1';
  try {
    assert.equal(mergeJsHeap(fresh(), js, 524288).bytes, (1 << 20) + 524288);
  } finally {
    if (prev === undefined) delete process.env.MIMALLOC_PPROF_TEST_JS_HEAP_RAW;
    else process.env.MIMALLOC_PPROF_TEST_JS_HEAP_RAW = prev;
  }
});

/** js-heap-both through the in-process API (fixtures/js-heap-both-api.mjs: start({ jsHeap: true }),
 * then profile({ jsHeap: true })). */
function apiFixture(env: Record<string, string> = {}): Found {
  const dir = tempDir('mpp-jsnames-api-');
  const out = join(dir, 'p.pb.gz');
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('MIMALLOC_') && k !== 'NODE_OPTIONS' && k !== 'LD_PRELOAD'));
  const r = spawnSync(process.execPath, ['--perf-basic-prof', '--interpreted-frames-native-stack', join(root, 'test', 'run', 'fixtures', 'js-heap-both-api.mjs'), out], {
    cwd: dir,
    encoding: 'utf8',
    env: { ...clean, LD_PRELOAD: libraryPath(), ...env },
    timeout: 60_000,
  });
  rmSync(`/tmp/perf-${r.pid}.map`, { force: true });
  assert.equal(r.status, 0, r.stderr);
  return examine(out);
}

/** What the in-process check finds wrong (empty: nothing). */
function apiProblems(f: Found): string[] {
  // the roots: those of the program's stacks as the native side names them, here the API
  // fixture's top level (its module runs js-heap-both.cjs), not js-heap-both's own
  const foreign = [...f.jsRoots].filter((r) => !f.nativeRoots.has(r) && !/^emit node:events:\d+$/.test(r));
  return [...problems(f).filter((p) => !p.startsWith('a JavaScript-heap root is')), ...foreign.map((r) => `a JavaScript-heap root no native stack has: ${r}`)];
}

test('the in-process API: one holdBoth with both heaps beneath it, and the JavaScript heap\'s roots are roots of the native stacks', (t) => {
  const f = apiFixture();
  t.diagnostic(`JS roots ${[...f.jsRoots].join(' | ')}; native roots ${[...f.nativeRoots].join(' | ')}`);
  assert.deepEqual(apiProblems(f), []);
});

test('control: the in-process API with V8\'s frames merged as they come (MIMALLOC_PPROF_TEST_JS_HEAP_RAW=1) fails the check', (t) => {
  const p = apiProblems(apiFixture({ MIMALLOC_PPROF_TEST_JS_HEAP_RAW: '1' }));
  t.diagnostic(`Node ${process.versions.node}, raw: ${p.join('; ')}`);
  assert.ok(p.length > 0, 'the check let the raw merge through');
});
