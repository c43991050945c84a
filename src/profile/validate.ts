/**
 * validateProfile: the model's validity rules, those of google/pprof's CheckValid plus the
 * string-table checks of its decoder (postDecode):
 *  - string_table[0] is '' and every string index (types, units, labels, names, file names,
 *    build ids, drop/keep frames, comments, default sample type, doc url) is in range;
 *  - samples exist only with sample types, and each has one value per sample type;
 *  - mapping, function and location ids are non-zero and unique within their table;
 *  - every reference resolves: sample → location, location → mapping (0 = none), line →
 *    function;
 *  - every integer field holds an integer (a safe integer number or a bigint).
 */
import { ProfileFormatError } from '../errors.js';
import { canonical, isZero, type Numeric, type Profile } from './model.js';

function fail(name: string, problem: string): never {
  throw new ProfileFormatError(`${name}: ${problem}`);
}

/** Throws ProfileFormatError (`<name>: <problem>`) unless `p` is a valid profile. */
export function validateProfile(p: Profile, name = 'profile'): void {
  const strings = p.stringTable.strings;
  const nstr = strings.length;
  if (nstr === 0 || strings[0] !== '') fail(name, "has no empty string at string_table[0], which profile.proto requires");

  const int = (v: Numeric, what: string): void => {
    if (typeof v === 'bigint') return;
    if (!Number.isSafeInteger(v)) fail(name, `has a non-integer ${what} (${String(v)})`);
  };
  const strIdx = (v: Numeric, what: string): void => {
    int(v, what);
    if (v < 0 || v >= nstr) fail(name, `has ${what} = ${String(v)}, outside its string table of ${nstr} entries`);
  };

  for (let i = 0; i < p.sampleType.length; i++) {
    const t = p.sampleType[i]!;
    strIdx(t.type, `sample_type[${i}].type`);
    strIdx(t.unit, `sample_type[${i}].unit`);
  }
  if (p.periodType) {
    strIdx(p.periodType.type, 'period_type.type');
    strIdx(p.periodType.unit, 'period_type.unit');
  }
  strIdx(p.dropFrames, 'drop_frames');
  strIdx(p.keepFrames, 'keep_frames');
  strIdx(p.defaultSampleType, 'default_sample_type');
  strIdx(p.docUrl, 'doc_url');
  for (let i = 0; i < p.comment.length; i++) strIdx(p.comment[i]!, `comment[${i}]`);
  int(p.timeNanos, 'time_nanos');
  int(p.durationNanos, 'duration_nanos');
  int(p.period, 'period');

  const mappings = new Set<Numeric>();
  for (const m of p.mapping) {
    const id = canonical(m.id);
    int(id, 'mapping id');
    if (isZero(id)) fail(name, 'has a mapping with the reserved id 0');
    if (id < 0) fail(name, `has a mapping with a negative id ${String(id)}`);
    if (mappings.has(id)) fail(name, `has two mappings with id ${String(id)}`);
    mappings.add(id);
    int(m.memoryStart, `mapping ${String(id)} memory_start`);
    int(m.memoryLimit, `mapping ${String(id)} memory_limit`);
    int(m.fileOffset, `mapping ${String(id)} file_offset`);
    strIdx(m.filename, `mapping ${String(id)} filename`);
    strIdx(m.buildId, `mapping ${String(id)} build_id`);
  }
  const functions = new Set<Numeric>();
  for (const f of p.function) {
    const id = canonical(f.id);
    int(id, 'function id');
    if (isZero(id)) fail(name, 'has a function with the reserved id 0');
    if (id < 0) fail(name, `has a function with a negative id ${String(id)}`);
    if (functions.has(id)) fail(name, `has two functions with id ${String(id)}`);
    functions.add(id);
    strIdx(f.name, `function ${String(id)} name`);
    strIdx(f.systemName, `function ${String(id)} system_name`);
    strIdx(f.filename, `function ${String(id)} filename`);
    int(f.startLine, `function ${String(id)} start_line`);
  }
  const locations = new Set<Numeric>();
  for (const l of p.location) {
    const id = canonical(l.id);
    int(id, 'location id');
    if (isZero(id)) fail(name, 'has a location with the reserved id 0');
    if (id < 0) fail(name, `has a location with a negative id ${String(id)}`);
    if (locations.has(id)) fail(name, `has two locations with id ${String(id)}`);
    locations.add(id);
    int(l.address, `location ${String(id)} address`);
    const mid = canonical(l.mappingId);
    int(mid, `location ${String(id)} mapping_id`);
    if (!isZero(mid) && !mappings.has(mid)) fail(name, `has location ${String(id)} referring to mapping ${String(mid)}, which does not exist`);
    for (const line of l.line) {
      const fid = canonical(line.functionId);
      int(fid, `location ${String(id)} function_id`);
      if (!functions.has(fid)) fail(name, `has location ${String(id)} with a line referring to function ${String(fid)}, which does not exist`);
      int(line.line, `location ${String(id)} line`);
      int(line.column, `location ${String(id)} column`);
    }
  }

  const ntypes = p.sampleType.length;
  if (ntypes === 0 && p.sample.length > 0) fail(name, 'has samples but no sample types');
  for (let i = 0; i < p.sample.length; i++) {
    const s = p.sample[i]!;
    if (s.value.length !== ntypes) {
      fail(name, `has sample ${i + 1} with ${s.value.length} values for ${ntypes} sample types`);
    }
    for (const v of s.value) int(v, `sample ${i + 1} value`);
    for (const lid of s.locationId) {
      const c = canonical(lid);
      if (!locations.has(c)) fail(name, `has sample ${i + 1} referring to location ${String(c)}, which does not exist`);
    }
    for (const lab of s.label) {
      strIdx(lab.key, `sample ${i + 1} label key`);
      strIdx(lab.str, `sample ${i + 1} label str`);
      strIdx(lab.numUnit, `sample ${i + 1} label num_unit`);
      int(lab.num, `sample ${i + 1} label num`);
    }
  }
}
