/** The offline HTML report: data (data.ts), page (page.ts), and writing it. */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

import type { Profile } from '../profile/model.js';
import { writeFileAtomic } from '../profile/files.js';
import { packageRoot } from '../preload/library.js';
import { reportData, type ReportData } from './data.js';
import { renderReport } from './page.js';

export type { ReportData, ProfileData, GrowthData } from './data.js';

function generator(): string {
  try {
    return `mimalloc-pprof ${(JSON.parse(readFileSync(join(packageRoot, 'package.json'), 'utf8')) as { version: string }).version}`;
  } catch {
    return 'mimalloc-pprof';
  }
}

/** The report page of `profiles` (one, or several of one process for the growth view). */
export function htmlReport(profiles: { profile: Profile; source: string }[]): string {
  return renderReport(reportData(profiles, generator()));
}

/** htmlReport written atomically to `path`. */
export function writeHtmlReport(path: string, profiles: { profile: Profile; source: string }[]): void {
  writeFileAtomic(path, htmlReport(profiles));
}
