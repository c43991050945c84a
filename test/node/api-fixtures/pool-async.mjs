// Thread-pool work from named functions, profiled in-process with allocated totals:
// crypto.pbkdf2 (hashPasswords), fs.readFile of a large file (loadBigFile) and dns.lookup
// (lookupMany). Writes the alloc_space profile to argv[3]; argv[2] is the large file.
import { pbkdf2 } from 'node:crypto';
import { lookup } from 'node:dns';
import { readFile, writeFileSync } from 'node:fs';

const { profiler } = await import(process.env.MPP_INDEX);
profiler.stop();
profiler.start({ interval: Number(process.env.INTERVAL ?? 4096), accum: true, btMax: 64 });

function hashPasswords(count, done) {
  let left = count;
  for (let i = 0; i < count; i++) pbkdf2(`secret${i}`, 'salt', 2000, 64, 'sha512', () => --left === 0 && done());
}

function loadBigFile(path, done) {
  readFile(path, (err, data) => done(err ? -1 : data.length));
}

function lookupMany(count, done) {
  let left = count;
  for (let i = 0; i < count; i++) lookup('localhost', { all: true }, () => --left === 0 && done());
}

await new Promise((resolve) => hashPasswords(64, resolve));
const fileBytes = await new Promise((resolve) => loadBigFile(process.argv[2], resolve));
await new Promise((resolve) => lookupMany(200, resolve));
writeFileSync(process.argv[3], await profiler.profile({ sampleType: 'alloc_space' }));
console.log(JSON.stringify({ fileBytes }));
