// A private apt configuration under build/apt: its own sources list (binary and source
// packages of Debian bookworm, trixie and sid), package lists and cache, so that
// `apt-get download` and `apt-get source --download-only` reach Debian's registry without root
// and without reading or changing the system's apt configuration or its packages. Nothing is
// installed: the scripts unpack what they fetch into build/ (dpkg -x, dpkg-source -x).
//
// The index files are verified by apt against Debian's archive keyring
// (/usr/share/keyrings/debian-archive-keyring.gpg), and every fetched file against the index.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
export const aptDir = join(root, 'build', 'apt');
export const SUITES = ['bookworm', 'trixie', 'sid'];
const KEYRING = '/usr/share/keyrings/debian-archive-keyring.gpg';

/** The Debian mirror the system's own apt uses (so the private lists reach the same registry). */
export function debianMirror() {
  const dir = '/etc/apt/sources.list.d';
  const files = ['/etc/apt/sources.list', ...(existsSync(dir) ? readdirSync(dir).map((f) => join(dir, f)) : [])];
  for (const f of files) {
    let text = '';
    try {
      text = readFileSync(f, 'utf8');
    } catch {
      continue;
    }
    const m = /^(?:URIs:\s*|deb\s+(?:\[[^\]]*\]\s*)?)(\S+\/debian)\/?\s/m.exec(text);
    if (m) return m[1];
  }
  return 'http://deb.debian.org/debian';
}

/** Whether this machine can use the private configuration (apt-get and Debian's keyring). */
export function aptUsable() {
  const onPath = (name) => (process.env.PATH ?? '').split(':').some((d) => d.startsWith('/') && existsSync(join(d, name)));
  return onPath('apt-get') && existsSync(KEYRING);
}

export function aptOptions(arch) {
  return [
    '-o', `Dir::Etc::SourceList=${join(aptDir, 'sources.list')}`,
    '-o', `Dir::Etc::SourceParts=${join(aptDir, 'sources.list.d')}`,
    '-o', `Dir::Etc::Preferences=${join(aptDir, 'preferences')}`,
    '-o', `Dir::Etc::PreferencesParts=${join(aptDir, 'preferences.d')}`,
    '-o', `Dir::State=${join(aptDir, 'state')}`,
    '-o', `Dir::State::Lists=${join(aptDir, 'lists')}`,
    '-o', `Dir::Cache=${join(aptDir, 'cache')}`,
    '-o', 'Dir::State::status=/var/lib/dpkg/status',
    '-o', 'Debug::NoLocking=1',
    // as root apt drops to _apt for downloads, which cannot write into build/
    '-o', 'APT::Sandbox::User=root',
    ...(arch ? ['-o', `APT::Architectures::=${arch}`] : []),
  ];
}

/**
 * Writes the configuration and runs `apt-get update` (at most once an hour: the lists are kept
 * in build/apt/lists). Returns the options for further apt-get / apt-cache calls.
 */
export function aptUpdate({ arch, force = false } = {}) {
  for (const d of ['lists/partial', 'cache/archives/partial', 'sources.list.d', 'preferences.d', 'state']) {
    mkdirSync(join(aptDir, d), { recursive: true });
  }
  const mirror = debianMirror();
  const archs = ['amd64', ...(arch && arch !== 'amd64' ? [arch] : [])].join(',');
  const list = SUITES.map((s) => `deb [arch=${archs} signed-by=${KEYRING}] ${mirror} ${s} main\ndeb-src [signed-by=${KEYRING}] ${mirror} ${s} main\n`).join('');
  const listFile = join(aptDir, 'sources.list');
  const changed = !existsSync(listFile) || readFileSync(listFile, 'utf8') !== list;
  if (changed) writeFileSync(listFile, list);
  const stamp = join(aptDir, 'state', 'updated');
  const fresh = !changed && existsSync(stamp) && Date.now() - statSync(stamp).mtimeMs < 3600_000;
  const opts = aptOptions(arch);
  if (force || !fresh) {
    try {
      execFileSync('apt-get', [...opts, '-qq', 'update'], { stdio: ['ignore', 'ignore', 'inherit'] });
    } catch (e) {
      throw new Error(`apt-get update with the private configuration in ${aptDir} failed (exit ${e.status ?? e.signal})`);
    }
    writeFileSync(stamp, new Date().toISOString() + '\n');
  }
  return opts;
}

/** The source versions of a package the configured suites carry, newest first. */
export function sourceVersions(name, opts) {
  const out = execFileSync('apt-cache', [...opts, 'showsrc', '--only-source', name], { encoding: 'utf8' });
  const versions = [...out.matchAll(/^Version: (\S+)$/gm)].map((m) => m[1]);
  const unique = [...new Set(versions)];
  return unique.sort((a, b) => {
    const r = execFileSync('sh', ['-c', 'dpkg --compare-versions "$1" gt "$2" && echo 1 || echo 0', 'sh', a, b], { encoding: 'utf8' }).trim();
    return r === '1' ? -1 : 1;
  });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const opts = aptUpdate({ force: process.argv.includes('--update') });
  const name = process.argv.find((a, i) => i >= 2 && !a.startsWith('--'));
  if (name) console.log(sourceVersions(name, opts).join('\n'));
  else console.log(opts.join(' '));
}
