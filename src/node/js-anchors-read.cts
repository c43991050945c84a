/**
 * The native stacks of V8's live samples, as the exit hook writes them beside V8's profile
 * (src/profile/js-anchors.ts: JsAnchors): by ordinal, hex return addresses, leaf first.
 *
 * `words` is the addon's jsAnchors(): per anchor [number, V8's sample_id read from the sample,
 * perf map bytes, depth, frames...], then [made, live, dropped]. An anchor's number must equal
 * the sample_id read from V8's own sample object: one live sample whose two differ means V8
 * lays out or numbers its samples otherwise than this package knows, and then none is used
 * (`refused` says why).
 */
export interface AnchorsRead {
  frames: Record<string, string[]>;
  mapBytes: Record<string, number>;
  made: number;
  live: number;
  dropped: number;
  refused?: string;
}

export function liveAnchors(words: BigUint64Array | null, samples: readonly { ordinal?: number }[]): AnchorsRead {
  const none = { frames: {}, mapBytes: {} };
  if (!words || words.length < 3) return { ...none, made: 0, live: 0, dropped: 0, refused: 'the library keeps no anchors' };
  const n = words.length - 3;
  const counts = { made: Number(words[n]), live: Number(words[n + 1]), dropped: Number(words[n + 2]) };
  const wanted = new Set(samples.map((s) => s.ordinal));
  const frames: Record<string, string[]> = {};
  const mapBytes: Record<string, number> = {};
  for (let i = 0; i + 4 <= n; ) {
    const seq = words[i]!;
    const id = words[i + 1]!;
    const depth = Number(words[i + 3]);
    if (i + 4 + depth > n) return { ...none, ...counts, refused: 'a truncated anchor list' };
    if (wanted.has(Number(seq))) {
      if (id !== seq) return { ...none, ...counts, refused: `anchor ${seq} reads sample_id ${id === (1n << 64n) - 1n ? '(unreadable)' : id}` };
      frames[String(seq)] = Array.from(words.subarray(i + 4, i + 4 + depth), (w) => w.toString(16));
      mapBytes[String(seq)] = Number(words[i + 2]);
    }
    i += 4 + depth;
  }
  return { frames, mapBytes, ...counts };
}
