/**
 * The profiling worker thread: dumps, symbolises and renders profiles off the application's
 * event loop. One message at a time, so at most one dump runs at once. Snapshots live here
 * (by id) until the main thread releases them; the main thread never holds a decoded profile.
 *
 * Protocol (main → worker): { seq, op: 'snapshot' } → { id, timeNs, samples }
 *   { seq, op: 'render', id, spec } · { seq, op: 'delta', baseId, id, spec } → { data }
 *   { seq, op: 'window', baseId?, id, fromNs, untilNs } → { data }
 *   { op: 'release', ids } (no answer). Errors answer { seq, error: { name, code, message } }.
 */
import { parentPort, workerData } from 'node:worker_threads';

import type { Profile } from '../profile/pprof.js';

import { mergeJsHeap, type V8SamplingHeapProfile } from '../profile/js-heap.js';
import { annotatePeak } from '../profile/peak.js';
import { humanBytes } from '../cli/top.js';
import { formatRssComment } from '../profile/rss.js';
import { measureRss, type V8HeapFigures } from './rss.cjs';
import { requireAddon, translate } from './addon.js';
import type { CodeLogStart } from './code-log.js';
import { render, renderDelta, renderWindow, takeSnapshot, type RenderSpec } from './engine.js';

export type WorkerRequest =
  | { seq: number; op: 'snapshot'; jsHeap?: { interval: number; profile: V8SamplingHeapProfile }; v8Heap?: V8HeapFigures; excludeSelf?: boolean; peak?: boolean; codeLog?: CodeLogStart }
  | { seq: number; op: 'render'; id: number; spec: RenderSpec }
  | { seq: number; op: 'delta'; baseId: number; id: number; spec: RenderSpec }
  | { seq: number; op: 'window'; baseId?: number; id: number; fromNs: bigint; untilNs: bigint }
  | { seq?: undefined; op: 'release'; ids: number[] };

export type WorkerResponse =
  | { seq: number; id: number; timeNs: bigint; samples: number }
  | { seq: number; data: Uint8Array }
  | { seq: number; error: { name: string; code?: string; message: string } };

if (parentPort) {
  const port = parentPort;
  const snapshots = new Map<number, { profile: Profile; timeNs: bigint; cache: Map<string, Uint8Array> }>();
  let nextId = 1;
  const { dumpPath } = workerData as { dumpPath: string };
  // This thread's memory (module code, ELF symbol tables, encoded profiles) is the profiler's,
  // not the application's: left out of profiles unless asked for (worker-entry.ts sets it
  // first; each snapshot request restates it, from then on).
  const exclude = (on: boolean) => {
    try {
      requireAddon().excludeThread(on);
    } catch {
      // no preload: every request answers with that error anyway
    }
  };
  const get = (id: number) => {
    const s = snapshots.get(id);
    if (!s) throw new Error(`snapshot ${id} is gone (released, or the profiling worker restarted)`);
    return s;
  };
  const reply = (msg: WorkerResponse) => {
    if ('data' in msg) port.postMessage(msg, [msg.data.buffer as ArrayBuffer]);
    else port.postMessage(msg);
  };

  port.on('message', (msg: WorkerRequest) => {
    if (msg.op === 'release') {
      for (const id of msg.ids) snapshots.delete(id);
      return;
    }
    try {
      switch (msg.op) {
        case 'snapshot': {
          if (msg.excludeSelf !== undefined) exclude(msg.excludeSelf);
          const id = nextId++;
          const timeNs = BigInt(Date.now()) * 1_000_000n;
          const profile = takeSnapshot(requireAddon(), dumpPath, msg.peak === true, msg.codeLog);
          // a peak profile says so, with the estimate's standard error and when (src/profile/peak.ts)
          if (msg.peak === true) annotatePeak(profile, humanBytes);
          if (msg.jsHeap) {
            const merged = mergeJsHeap(profile, msg.jsHeap.profile, msg.jsHeap.interval);
            profile.comment.push(
              profile.stringTable.dedup(`heap=js: V8's sampling heap profiler at interval=${msg.jsHeap.interval}: ${Math.round(merged.bytes)} bytes of JavaScript objects in use (${merged.samples} samples)`),
            );
          }
          if (msg.v8Heap) {
            // the resident set as the dump left it, read here, off the application's event loop
            try {
              profile.comment.push(profile.stringTable.dedup(formatRssComment(measureRss(requireAddon(), msg.v8Heap))));
            } catch {
              // /proc unreadable: the profile goes without its breakdown
            }
          }
          snapshots.set(id, { profile, timeNs, cache: new Map() });
          reply({ seq: msg.seq, id, timeNs, samples: profile.sample.length });
          break;
        }
        case 'render': {
          const snap = get(msg.id);
          reply({ seq: msg.seq, data: copy(render(snap.profile, msg.spec, snap.cache)) });
          break;
        }
        case 'delta': {
          const base = get(msg.baseId);
          const next = get(msg.id);
          reply({ seq: msg.seq, data: copy(renderDelta(base.profile, base.timeNs, next.profile, next.timeNs, msg.spec)) });
          break;
        }
        case 'window': {
          const base = msg.baseId === undefined ? undefined : get(msg.baseId).profile;
          reply({ seq: msg.seq, data: copy(renderWindow(base, get(msg.id).profile, msg.fromNs, msg.untilNs)) });
          break;
        }
      }
    } catch (e) {
      const t = translate(e) as { name?: string; code?: string; message?: string };
      reply({ seq: msg.seq, error: { name: t.name ?? 'Error', ...(t.code ? { code: t.code } : {}), message: t.message ?? String(e) } });
    }
  });
}

/** A copy to transfer: the original may be cached here, or share a pooled buffer. */
function copy(data: Uint8Array): Uint8Array {
  return data.slice();
}
