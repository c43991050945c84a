/**
 * V8's sampling heap profiler for the in-process API: the JavaScript heap beside the native
 * heap (src/profile/js-heap.ts merges it). An inspector session of this thread's isolate,
 * started once at the native profile's interval; its profile is read synchronously (the
 * in-process session answers before `post` returns) and sent with the snapshot request, so
 * the worker thread merges what the application thread's heap held at the same moment.
 */
import { Session } from 'node:inspector';

import type { V8SamplingHeapProfile } from '../profile/js-heap.js';

let session: Session | undefined;
let samplingInterval = 0;

/** Starts sampling this thread's heap at `interval` bytes (once; later calls keep the first). */
export function startJsHeap(interval: number): boolean {
  if (session) return true;
  try {
    const s = new Session();
    s.connect();
    let ok = false;
    s.post('HeapProfiler.startSampling', { samplingInterval: interval }, (err) => {
      ok = !err;
    });
    if (!ok) {
      s.disconnect();
      return false;
    }
    session = s;
    samplingInterval = interval;
    return true;
  } catch {
    return false;
  }
}

export function jsHeapRunning(): boolean {
  return session !== undefined;
}

/** The live sampled objects now, or undefined when not sampling. */
export function takeJsHeap(): { interval: number; profile: V8SamplingHeapProfile } | undefined {
  if (!session) return undefined;
  let profile: V8SamplingHeapProfile | undefined;
  session.post('HeapProfiler.getSamplingProfile', (err, r) => {
    if (!err) profile = r.profile as unknown as V8SamplingHeapProfile;
  });
  return profile ? { interval: samplingInterval, profile } : undefined;
}
