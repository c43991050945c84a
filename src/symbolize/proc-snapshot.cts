/**
 * Run inside a Node process that `run` profiles (its exit hook, src/node/exit-hook.cts), right
 * after the dump: what naming its frames in V8's copy of the embedded builtins needs once the
 * process has gone (src/symbolize/code-copies.ts): `maps.<pid>.txt` (`maps.<pid>.t<thread
 * id>.txt` from a worker thread, whose isolate has its own copy), a copy of
 * /proc/self/maps, and, unless the copy is a second mapping of its file (the usual case),
 * `pageheads.<pid>.bin`: the first 64 bytes of every page of anonymous executable memory, as
 * (8-byte little-endian address, 64 bytes) records. Synchronous, no allocation beyond a few
 * buffers; any failure leaves the files out (the frames then stay unnamed).
 */
import { closeSync, openSync, readFileSync, readSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const HEAD_BYTES = 64; // code-copies.ts HEAD_BYTES
const PAGE = 4096;
const LIMIT = 512 * 1024 * 1024; // at most this much anonymous executable memory is read

export function snapshotCodeMemory(dir: string, pid: number, threadId = 0): void {
  // a worker thread's isolate has a copy of its own, gone with the worker: each records its own
  const name = threadId === 0 ? `${pid}` : `${pid}.t${threadId}`;
  const maps = readFileSync('/proc/self/maps', 'utf8');
  writeFileSync(join(dir, `maps.${name}.txt`), maps);
  const files = new Map<string, { offset: number; end: number }[]>();
  const anonymous: { start: number; end: number }[] = [];
  for (const line of maps.split('\n')) {
    const m = /^([0-9a-f]+)-([0-9a-f]+) \S\S(\S)\S ([0-9a-f]+) \S+ \d+ *(.*)$/.exec(line);
    if (!m || m[3] !== 'x') continue;
    const start = parseInt(m[1]!, 16);
    const end = parseInt(m[2]!, 16);
    const offset = parseInt(m[4]!, 16);
    const path = m[5]!;
    if (path.startsWith('/')) {
      const ranges = files.get(path) ?? [];
      ranges.push({ offset, end: offset + (end - start) });
      files.set(path, ranges);
    } else if (!path.startsWith('[v')) anonymous.push({ start, end });
  }
  // a file mapped executable twice over the same bytes: V8's copy is file-backed
  for (const ranges of files.values()) {
    for (let i = 0; i < ranges.length; i++)
      for (let j = i + 1; j < ranges.length; j++) if (ranges[i]!.offset < ranges[j]!.end && ranges[j]!.offset < ranges[i]!.end) return;
  }
  const fd = openSync('/proc/self/mem', 'r');
  try {
    const out: Buffer[] = [];
    const chunk = Buffer.allocUnsafe(1 << 20);
    let budget = LIMIT;
    for (const r of anonymous) {
      for (let at = r.start; at < r.end && budget > 0; at += chunk.length) {
        const len = Math.min(chunk.length, r.end - at);
        budget -= len;
        let n: number;
        try {
          n = readSync(fd, chunk, 0, len, at);
        } catch {
          continue;
        }
        for (let off = 0; off + HEAD_BYTES <= n; off += PAGE) {
          const rec = Buffer.allocUnsafe(8 + HEAD_BYTES);
          rec.writeBigUInt64LE(BigInt(at + off), 0);
          chunk.copy(rec, 8, off, off + HEAD_BYTES);
          out.push(rec);
        }
      }
    }
    writeFileSync(join(dir, `pageheads.${name}.bin`), Buffer.concat(out));
  } finally {
    closeSync(fd);
  }
}
