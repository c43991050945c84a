/**
 * ProfileBuilder: assembles a new profile from parts of others (merge, diff, scale). It
 * copies mappings, functions and locations into its own tables with fresh ids and its own
 * string table, deduplicating them with google/pprof's keys (merge.go):
 *  - a mapping by its size (rounded up to 4 KiB), file offset and build id (else file), so
 *    the same binary loaded at different addresses (ASLR) is one mapping; the first one
 *    seen keeps its addresses and later locations are shifted onto it;
 *  - a function by name, system name, file name and start line;
 *  - a location by mapping, address relative to the mapping start, folding and lines.
 * Samples with the same key are summed (int64, wrapping as Go does).
 */
import {
  add64,
  canon,
  canonical,
  Function as PFunction,
  indexProfile,
  isZero,
  Label,
  Line,
  Location,
  Mapping,
  type Numeric,
  Profile,
  type ProfileIndex,
  Sample,
  str,
  StringTable,
  toBig,
  ValueType,
} from './model.js';

/** Per-source bookkeeping: old id → new id (and address shift for mappings). */
export interface Source {
  readonly ix: ProfileIndex;
  readonly mappings: Map<Numeric, { id: number; shift: bigint; start: bigint }>;
  readonly functions: Map<Numeric, number>;
  readonly locations: Map<Numeric, number>;
}

export interface BuiltSample {
  locationIds: number[];
  values: Numeric[];
  labels: Label[];
}

export class ProfileBuilder {
  readonly strings = new StringTable();
  readonly mappings: Mapping[] = [];
  readonly functions: PFunction[] = [];
  readonly locations: Location[] = [];
  readonly samples = new Map<string, BuiltSample>();
  private readonly mappingKeys = new Map<string, { id: number; start: bigint }>();
  private readonly functionKeys = new Map<string, number>();
  private readonly locationKeys = new Map<string, number>();

  source(p: Profile): Source {
    return { ix: indexProfile(p), mappings: new Map(), functions: new Map(), locations: new Map() };
  }

  /** The new mapping of a source mapping id (undefined for 0), with the address shift onto it. */
  mapping(src: Source, id: Numeric): { id: number; shift: bigint; start: bigint } | undefined {
    const key = canonical(id);
    if (isZero(key)) return undefined;
    const done = src.mappings.get(key);
    if (done) return done;
    const m = src.ix.mappings.get(key)!;
    const p = src.ix.profile;
    const start = toBig(m.memoryStart);
    let size = BigInt.asUintN(64, toBig(m.memoryLimit) - start) + 0xfffn;
    size -= size % 0x1000n;
    const file = str(p, m.filename);
    const buildId = str(p, m.buildId);
    const k = `${size}|${String(m.fileOffset)}|${buildId !== '' ? `b:${buildId}` : file !== '' ? `f:${file}` : ''}`;
    let target = this.mappingKeys.get(k);
    if (!target) {
      const nid = this.mappings.length + 1;
      this.mappings.push(
        new Mapping({
          id: nid,
          memoryStart: m.memoryStart,
          memoryLimit: m.memoryLimit,
          fileOffset: m.fileOffset,
          filename: this.strings.dedup(file),
          buildId: this.strings.dedup(buildId),
          hasFunctions: m.hasFunctions,
          hasFilenames: m.hasFilenames,
          hasLineNumbers: m.hasLineNumbers,
          hasInlineFrames: m.hasInlineFrames,
        }),
      );
      target = { id: nid, start };
      this.mappingKeys.set(k, target);
    }
    const info = { id: target.id, shift: target.start - start, start: target.start };
    src.mappings.set(key, info);
    return info;
  }

  private func(src: Source, id: Numeric): number {
    const key = canonical(id);
    const done = src.functions.get(key);
    if (done !== undefined) return done;
    const f = src.ix.functions.get(key)!;
    const p = src.ix.profile;
    const name = str(p, f.name);
    const systemName = str(p, f.systemName);
    const filename = str(p, f.filename);
    const k = JSON.stringify([String(f.startLine), name, systemName, filename]);
    let nid = this.functionKeys.get(k);
    if (nid === undefined) {
      nid = this.functions.length + 1;
      this.functions.push(
        new PFunction({
          id: nid,
          name: this.strings.dedup(name),
          systemName: this.strings.dedup(systemName),
          filename: this.strings.dedup(filename),
          startLine: f.startLine,
        }),
      );
      this.functionKeys.set(k, nid);
    }
    src.functions.set(key, nid);
    return nid;
  }

  /** The new id of a source location (copied with its mapping and functions). */
  location(src: Source, id: Numeric): number {
    const key = canonical(id);
    const done = src.locations.get(key);
    if (done !== undefined) return done;
    const l = src.ix.locations.get(key)!;
    const m = this.mapping(src, l.mappingId);
    let address: Numeric = l.address;
    if (m && !isZero(address)) address = canon(BigInt.asUintN(64, toBig(address) + m.shift));
    const lines = l.line.map((ln) => ({ functionId: this.func(src, ln.functionId), line: ln.line, column: ln.column }));
    const rel = m ? BigInt.asUintN(64, toBig(address) - m.start) : toBig(address);
    const k = `${m ? m.id : 0}|${rel}|${l.isFolded ? 1 : 0}|${lines.map((ln) => `${ln.functionId},${String(ln.line)},${String(ln.column)}`).join(';')}`;
    let nid = this.locationKeys.get(k);
    if (nid === undefined) {
      nid = this.locations.length + 1;
      this.locations.push(
        new Location({ id: nid, mappingId: m ? m.id : 0, address, isFolded: l.isFolded, line: lines.map((ln) => new Line(ln)) }),
      );
      this.locationKeys.set(k, nid);
    }
    src.locations.set(key, nid);
    return nid;
  }

  /** Labels of a source sample, re-expressed in this builder's string table. */
  labels(src: Source, s: Sample): Label[] {
    const p = src.ix.profile;
    return s.label.map(
      (l) =>
        new Label({
          key: this.strings.dedup(str(p, l.key)),
          str: isZero(l.str) ? 0 : this.strings.dedup(str(p, l.str)),
          num: l.num,
          numUnit: isZero(l.numUnit) ? 0 : this.strings.dedup(str(p, l.numUnit)),
        }),
    );
  }

  /** Adds `values` to the sample under `key` (created with these locations and labels). */
  add(key: string, locationIds: number[], values: Numeric[], labels: Label[]): void {
    const s = this.samples.get(key);
    if (!s) {
      this.samples.set(key, { locationIds, values: values.slice(), labels });
      return;
    }
    for (let i = 0; i < values.length; i++) s.values[i] = add64(s.values[i]!, values[i]!);
  }

  /**
   * The profile: `header` strings are re-interned here; samples whose values are all 0 are
   * dropped unless `keepZero`.
   */
  build(header: {
    sampleType: [string, string][];
    periodType?: [string, string];
    period?: Numeric;
    timeNanos?: Numeric;
    durationNanos?: Numeric;
    comments?: string[];
    defaultSampleType?: string;
    dropFrames?: string;
    keepFrames?: string;
    docUrl?: string;
  }, keepZero = false): Profile {
    const st = this.strings;
    const sample: Sample[] = [];
    for (const s of this.samples.values()) {
      if (!keepZero && s.values.every(isZero)) continue;
      sample.push(new Sample({ locationId: s.locationIds, value: s.values, label: s.labels }));
    }
    return new Profile({
      sampleType: header.sampleType.map(([t, u]) => new ValueType({ type: st.dedup(t), unit: st.dedup(u) })),
      sample,
      mapping: this.mappings,
      location: this.locations,
      function: this.functions,
      stringTable: st,
      ...(header.periodType ? { periodType: new ValueType({ type: st.dedup(header.periodType[0]), unit: st.dedup(header.periodType[1]) }) } : {}),
      period: header.period ?? 0,
      timeNanos: header.timeNanos ?? 0,
      durationNanos: header.durationNanos ?? 0,
      comment: (header.comments ?? []).map((c) => st.dedup(c)),
      defaultSampleType: st.dedup(header.defaultSampleType ?? ''),
      dropFrames: st.dedup(header.dropFrames ?? ''),
      keepFrames: st.dedup(header.keepFrames ?? ''),
      docUrl: st.dedup(header.docUrl ?? ''),
    });
  }
}

/** A sample's labels as a stable key (pprof's sampleKey uses labels and locations). */
export function labelKey(p: Profile, s: Sample): string {
  return s.label
    .map((l) => JSON.stringify([str(p, l.key), str(p, l.str), String(l.num), str(p, l.numUnit)]))
    .sort()
    .join(',');
}

/** The header fields of a profile as strings (for ProfileBuilder.build). */
export function headerOf(p: Profile): {
  periodType?: [string, string];
  period: Numeric;
  timeNanos: Numeric;
  durationNanos: Numeric;
  comments: string[];
  defaultSampleType: string;
  dropFrames: string;
  keepFrames: string;
  docUrl: string;
} {
  return {
    ...(p.periodType ? { periodType: [str(p, p.periodType.type), str(p, p.periodType.unit)] as [string, string] } : {}),
    period: canonical(p.period),
    timeNanos: canonical(p.timeNanos),
    durationNanos: canonical(p.durationNanos),
    comments: p.comment.map((c) => str(p, c)),
    defaultSampleType: str(p, p.defaultSampleType),
    dropFrames: str(p, p.dropFrames),
    keepFrames: str(p, p.keepFrames),
    docUrl: str(p, p.docUrl),
  };
}

export function sampleTypesOf(p: Profile): [string, string][] {
  return p.sampleType.map((t) => [str(p, t.type), str(p, t.unit)]);
}
