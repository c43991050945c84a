// Installs what the test suite uses besides npm packages: the real google/pprof
// (`go tool pprof`, Debian golang-go), valgrind for the callgrind benchmark, g++ for the
// C++ fixtures. As root on Debian/Ubuntu they are installed; elsewhere a missing one stops
// the run with one line naming it.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';

const needs = [
  ['go', 'golang-go'],
  ['valgrind', 'valgrind'],
  ['g++', 'g++'],
  ['setarch', 'util-linux'],
];

const has = (cmd) => spawnSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' }).status === 0;
const missing = needs.filter(([cmd]) => !has(cmd)).map(([, pkg]) => pkg);
if (missing.length > 0) {
  if (process.getuid?.() === 0 && existsSync('/usr/bin/apt-get')) {
    console.error(`mimalloc-pprof tests: installing ${missing.join(' ')} with apt-get`);
    const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
    execFileSync('apt-get', ['update', '-qq'], { stdio: 'inherit', env });
    execFileSync('apt-get', ['install', '-y', '-qq', ...missing], { stdio: 'inherit', env });
  } else {
    console.error(`mimalloc-pprof tests: missing ${missing.join(', ')}; install them first`);
    process.exit(1);
  }
}
