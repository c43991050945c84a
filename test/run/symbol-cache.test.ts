/**
 * The symbol cache `run` keeps (src/symbolize/elf.ts): node's symbol table read from the cache
 * names every probed address exactly as a fresh read does; a damaged cache file is ignored
 * (same names again). Positive control: a well-formed cache whose addresses were shifted gives
 * other names, so the comparison would catch a cache that lied.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import * as nodeModule from 'node:module';
import { join } from 'node:path';
import { test } from 'node:test';

import { root, tempDir } from '../helpers.js';

const elf = join(root, 'dist', 'src', 'symbolize', 'elf.js');
/** Names of 2 000 addresses spread over node's text (or libnode's), in a fresh process (no in-memory cache). */
function names(cacheDir: string): string[] {
  const script = `
    import { readFileSync } from 'node:fs';
    import { readElf } from ${JSON.stringify(elf)};
    // node's code: the executable, or libnode where the distribution splits it out
    const lib = readFileSync('/proc/self/maps', 'utf8').split('\\n').map((l) => l.split(/\\s+/)[5] ?? '').find((p) => /\\/libnode\\.so/.test(p));
    const f = readElf(lib ?? process.execPath);
    const s = f.symbolizer();
    // the largest executable segment (node's first one is a few KiB of stubs)
    const text = f.loadSegments.filter((l) => l.flags & 1).sort((a, b) => b.filesz - a.filesz)[0];
    const out = [];
    for (let i = 0; i < 2000; i++) out.push(s.lookup(text.vaddr + Math.floor((text.memsz ?? text.filesz) * i / 2000))?.name ?? '');
    console.log(JSON.stringify(out));
  `;
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', env: { ...process.env, MIMALLOC_PPROF_CACHE_DIR: cacheDir }, maxBuffer: 64 << 20 });
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout) as string[];
}

test('node\'s symbols from the cache name addresses as a fresh read does; a damaged cache is ignored', () => {
  const dir = tempDir('mpp-symcache-');
  const fresh = names(dir);
  assert.ok(fresh.filter((n) => n !== '').length > 1000, 'most addresses named');
  const files = readdirSync(join(dir, 'symbols')).filter((f) => f.endsWith('.bin'));
  assert.equal(files.length, 1);
  const file = join(dir, 'symbols', files[0]!);
  assert.equal((statSync(file).mode & 0o777).toString(8), '600');
  assert.deepEqual(names(dir), fresh); // from the cache
  const good = readFileSync(file);
  writeFileSync(file, good.subarray(0, good.length - 3)); // truncated
  assert.deepEqual(names(dir), fresh);
  // positive control: starts shifted by 64 bytes, the file otherwise well-formed
  const shifted = Buffer.from(good);
  const headerLength = shifted.readUInt32LE('mimalloc-pprof symbols 1\n'.length);
  const at = Math.ceil(('mimalloc-pprof symbols 1\n'.length + 4 + headerLength) / 8) * 8;
  const n = JSON.parse(shifted.toString('utf8', 'mimalloc-pprof symbols 1\n'.length + 4, 'mimalloc-pprof symbols 1\n'.length + 4 + headerLength)).n as number;
  for (let k = 0; k < n; k++) shifted.writeDoubleLE(shifted.readDoubleLE(at + 8 * k) + 64, at + 8 * k);
  writeFileSync(file, shifted);
  assert.notDeepEqual(names(dir), fresh);
});

test('demangled names kept on disk come back as the demangler gives them, added by appends; a torn line is skipped; control: a wrong entry is used as is', () => {
  const dir = tempDir('mpp-demangle-cache-');
  const demangle = join(root, 'dist', 'src', 'symbolize', 'demangle.js');
  const mangled = ['_ZN4node6Buffer3NewEPN2v87IsolateEm', '_ZNSt6vectorIiSaIiEE9push_backERKi', '_ZN2v88internal4Heap14CollectGarbageENS0_15AllocationSpaceE', '_RNvCs1234_5crate4main', 'malloc'];
  const run = (persist: boolean, names = mangled) => {
    const script = `
      import { demangle, persistDemangled, saveDemangled } from ${JSON.stringify(demangle)};
      if (${persist}) persistDemangled();
      console.log(JSON.stringify(${JSON.stringify(names)}.map(demangle)));
      saveDemangled();
    `;
    const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', env: { ...process.env, MIMALLOC_PPROF_CACHE_DIR: dir } });
    assert.equal(r.status, 0, r.stderr);
    return JSON.parse(r.stdout) as string[];
  };
  const fresh = run(false);
  assert.equal(fresh[0], 'node::Buffer::New(v8::Isolate*, unsigned long)');
  const file = join(dir, 'demangled.txt');
  writeFileSync(join(dir, 'demangled.json'), '[]'); // the format before: removed when the file is first written
  assert.deepEqual(run(true, mangled.slice(0, 3)), fresh.slice(0, 3)); // writes the file
  assert.equal((statSync(file).mode & 0o777).toString(8), '600');
  assert.equal(existsSync(join(dir, 'demangled.json')), false);
  const first = readFileSync(file, 'utf8');
  assert.deepEqual(run(true), fresh); // three from the file, the others added
  const second = readFileSync(file, 'utf8');
  assert.ok(second.startsWith(first) && second.length > first.length, 'the new names appended, the old lines as they were');
  assert.equal(second.split('\n').filter((l) => l.startsWith('_')).length, 4, 'each mangled name once (malloc is not mangled)');
  run(true);
  assert.equal(readFileSync(file, 'utf8'), second, 'nothing written when every name was known');
  // a write cut short, continued by the next one: one line with two tabs, skipped
  const [head, ...lines] = second.split('\n');
  const torn = [head, lines[0]!.slice(0, -5) + lines[1], ...lines.slice(2)].join('\n');
  writeFileSync(file, torn);
  assert.deepEqual(run(true), fresh);
  // a symbol name holding a newline (ELF names end at their NUL only) writes no line: it would
  // name another symbol
  const sneaky = `_ZN4evil3fooEv\n${mangled[0]}`;
  run(true, [sneaky]);
  assert.deepEqual(run(true), fresh);
  assert.ok(!readFileSync(file, 'utf8').includes('evil'), 'the name with a newline was not kept');
  writeFileSync(file, second);
  // control: a well-formed wrong entry is believed (so the runs above did read the file)
  writeFileSync(file, second.replace(`${mangled[0]}\t${fresh[0]}\n`, `${mangled[0]}\twrong\n`));
  assert.equal(run(true)[0], 'wrong');
});

test('the CLI keeps V8\'s code cache of its modules in a private folder of the cache (Node 22.8 on); none with MIMALLOC_PPROF_CACHE_DIR=off', (t) => {
  const cli = join(root, 'dist', 'src', 'cli', 'bin.js');
  const dir = tempDir('mpp-compile-cache-');
  const help = (cacheDir: string) => {
    const r = spawnSync(process.execPath, [cli, 'top', '--help'], { encoding: 'utf8', env: { ...process.env, MIMALLOC_PPROF_CACHE_DIR: cacheDir } });
    assert.equal(r.status, 0, r.stderr);
    return r.stdout;
  };
  const first = help(dir);
  if (!('enableCompileCache' in nodeModule)) {
    t.diagnostic(`Node ${process.version} has no module.enableCompileCache`);
    assert.equal(existsSync(join(dir, 'compile')), false);
    return;
  }
  const compiled = join(dir, 'compile');
  assert.equal((statSync(compiled).mode & 0o777).toString(8), '700');
  const files = readdirSync(compiled, { recursive: true }).map(String).filter((f) => statSync(join(compiled, f)).isFile());
  assert.ok(files.length >= 10, `the modules' code cached (${files.length} files)`);
  assert.equal(help(dir), first); // from the cache, the same
  const off = tempDir('mpp-compile-cache-off-');
  writeFileSync(join(off, 'marker'), '');
  const env = { ...process.env, MIMALLOC_PPROF_CACHE_DIR: 'off', HOME: off, XDG_CACHE_HOME: off };
  assert.equal(spawnSync(process.execPath, [cli, 'top', '--help'], { env, cwd: off }).status, 0);
  assert.deepEqual(readdirSync(off), ['marker'], 'nothing written with the cache off');
});
