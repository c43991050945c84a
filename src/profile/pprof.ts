/**
 * profile.proto's messages as this package's types, over pprof-format's codec: the only
 * module that imports pprof-format. The declarations shipped with the package name these
 * structural types and never pprof-format's own, whose `#private` fields fail a consumer's
 * `tsc` at its default target (ES5, TS18028) unless `skipLibCheck` is on.
 */
import * as codec from 'pprof-format';

type Numeric = number | bigint;

interface Encodable {
  encode(buffer?: Uint8Array<ArrayBuffer>): Uint8Array;
}

export interface StringTable {
  strings: string[];
  readonly encodedLength: number;
  encode(buffer?: Uint8Array<ArrayBuffer>): Uint8Array;
  /** The index of `string`, added when new. */
  dedup(string: string): number;
  /** The codec's reader: appends one string given as its UTF-8 bytes. */
  _decodeString(buffer: Uint8Array): void;
}
/** Passed to `new StringTable(emptyTableToken)`: a table without the leading empty string. */
export const emptyTableToken: symbol = codec.emptyTableToken;
export const StringTable = codec.StringTable as unknown as { new (tok?: symbol): StringTable };

export type ValueTypeInput = { type?: Numeric; unit?: Numeric };
export interface ValueType extends Encodable {
  type: Numeric;
  unit: Numeric;
}
export const ValueType = codec.ValueType as unknown as { new (data: ValueTypeInput): ValueType; decode(buffer: Uint8Array): ValueType };

export type LabelInput = { key?: Numeric; str?: Numeric; num?: Numeric; numUnit?: Numeric };
export interface Label extends Encodable {
  key: Numeric;
  str: Numeric;
  num: Numeric;
  numUnit: Numeric;
}
export const Label = codec.Label as unknown as { new (data: LabelInput): Label; decode(buffer: Uint8Array): Label };

export type SampleInput = { locationId?: Numeric[]; value?: Numeric[]; label?: LabelInput[] };
export interface Sample extends Encodable {
  locationId: Numeric[];
  value: Numeric[];
  label: Label[];
}
export const Sample = codec.Sample as unknown as { new (data: SampleInput): Sample; decode(buffer: Uint8Array): Sample };

export type MappingInput = {
  id?: Numeric;
  memoryStart?: Numeric;
  memoryLimit?: Numeric;
  fileOffset?: Numeric;
  filename?: Numeric;
  buildId?: Numeric;
  hasFunctions?: boolean;
  hasFilenames?: boolean;
  hasLineNumbers?: boolean;
  hasInlineFrames?: boolean;
};
export interface Mapping extends Encodable {
  id: Numeric;
  memoryStart: Numeric;
  memoryLimit: Numeric;
  fileOffset: Numeric;
  filename: Numeric;
  buildId: Numeric;
  hasFunctions: boolean;
  hasFilenames: boolean;
  hasLineNumbers: boolean;
  hasInlineFrames: boolean;
}
export const Mapping = codec.Mapping as unknown as { new (data: MappingInput): Mapping; decode(buffer: Uint8Array): Mapping };

export type LineInput = { functionId?: Numeric; line?: Numeric; column?: Numeric };
export interface Line extends Encodable {
  functionId: Numeric;
  line: Numeric;
  column: Numeric;
}
export const Line = codec.Line as unknown as { new (data: LineInput): Line; decode(buffer: Uint8Array): Line };

export type LocationInput = { id?: Numeric; mappingId?: Numeric; address?: Numeric; line?: LineInput[]; isFolded?: boolean };
export interface Location extends Encodable {
  id: Numeric;
  mappingId: Numeric;
  address: Numeric;
  line: Line[];
  isFolded: boolean;
}
export const Location = codec.Location as unknown as { new (data: LocationInput): Location; decode(buffer: Uint8Array): Location };

export type FunctionInput = { id?: Numeric; name?: Numeric; systemName?: Numeric; filename?: Numeric; startLine?: Numeric };
interface ProfileFunction extends Encodable {
  id: Numeric;
  name: Numeric;
  systemName: Numeric;
  filename: Numeric;
  startLine: Numeric;
}
const ProfileFunction = codec.Function as unknown as { new (data: FunctionInput): ProfileFunction; decode(buffer: Uint8Array): ProfileFunction };
export { ProfileFunction as Function };

export type ProfileInput = {
  sampleType?: ValueTypeInput[];
  sample?: SampleInput[];
  mapping?: MappingInput[];
  location?: LocationInput[];
  function?: FunctionInput[];
  stringTable?: StringTable;
  dropFrames?: Numeric;
  keepFrames?: Numeric;
  timeNanos?: Numeric;
  durationNanos?: Numeric;
  periodType?: ValueTypeInput;
  period?: Numeric;
  comment?: Numeric[];
  defaultSampleType?: Numeric;
  docUrl?: Numeric;
};
export interface Profile extends Encodable {
  sampleType: ValueType[];
  sample: Sample[];
  mapping: Mapping[];
  location: Location[];
  function: ProfileFunction[];
  stringTable: StringTable;
  dropFrames: Numeric;
  keepFrames: Numeric;
  timeNanos: Numeric;
  durationNanos: Numeric;
  periodType?: ValueType;
  period: Numeric;
  comment: Numeric[];
  defaultSampleType: Numeric;
  docUrl: Numeric;
  encodeAsync(buffer?: Uint8Array<ArrayBuffer>): Promise<Uint8Array>;
}
export const Profile = codec.Profile as unknown as { new (data?: ProfileInput): Profile; decode(buffer: Uint8Array): Profile };
