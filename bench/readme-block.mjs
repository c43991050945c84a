// What the benchmarks that record their figures in bench/README.md share: the median, and the
// rewrite of a block between <!-- NAME:begin --> and <!-- NAME:end --> (appended if absent).
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const readme = join(dirname(fileURLToPath(import.meta.url)), 'README.md');

export function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const k = s.length >> 1;
  return s.length % 2 ? s[k] : (s[k - 1] + s[k]) / 2;
}

export const markers = (name) => ({ begin: `<!-- ${name}:begin -->`, end: `<!-- ${name}:end -->` });

/** Replaces NAME's block (its markers included) with `lines` framed by the markers. */
export function writeBlock(name, lines) {
  const { begin, end } = markers(name);
  const block = [begin, ...lines, end].join('\n');
  const text = readFileSync(readme, 'utf8');
  const b = text.indexOf(begin);
  const e = text.indexOf(end);
  writeFileSync(readme, b >= 0 && e > b ? text.slice(0, b) + block + text.slice(e + end.length) : `${text}\n${block}\n`);
}
