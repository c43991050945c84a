// Runs every compiled test file (dist/test/**/*.test.js) under node's test runner, one file
// at a time (the native tests measure processes and should not compete for the 2 cores).
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const files = readdirSync(join(root, 'dist', 'test'), { recursive: true })
  .map(String)
  .filter((f) => f.endsWith('.test.js'))
  .sort()
  .map((f) => join(root, 'dist', 'test', f));
const r = spawnSync(process.execPath, ['--test', '--test-concurrency=1', ...process.argv.slice(2), ...files], { stdio: 'inherit' });
process.exit(r.status ?? 1);
