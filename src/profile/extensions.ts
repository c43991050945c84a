/** What a profile file's name says of its format, for every command that writes one (convert,
 * run): kept apart from the encoders so that run's start loads nothing more. */
export type OutputFormat = 'heap_v2' | 'proto';

/** Output extensions and their formats (longest match first). */
export const OUTPUT_FORMATS: readonly (readonly [string, OutputFormat])[] = [
  ['.pb.gz', 'proto'],
  ['.pprof', 'proto'],
  ['.pb', 'proto'],
  ['.heap', 'heap_v2'],
  ['.txt', 'heap_v2'],
];

/** The format `path`'s extension names, if it names one. */
export function formatOfName(path: string): OutputFormat | undefined {
  const lower = path.toLowerCase();
  return OUTPUT_FORMATS.find(([ext]) => lower.endsWith(ext))?.[1];
}
