/**
 * End to end (issue 29, items 1 and 2; the harness: growth-e2e.ts): a leaking HTTP service whose
 * leaking function the JIT inlines (fixtures/leaky-http-inlined.mjs: each request calls
 * rememberItem sixteen times from a loop, and each call keeps a 4 KiB typed array; rememberItem
 * is small and hot, and TurboFan inlines it into handleItem, so its allocations run inside
 * handleItem's machine code) under `run --every 1s` at the default interval, driven at 250
 * requests a second for 11 s, with Node's default inlining. growth's first three rows must name
 * rememberItem with its file:line, at its rate within ±30 % (44 000 blocks, q = 1 - e^(-4096/R)
 * = 0.0078 at R = 512 KiB: about 343 sampled, a relative standard error near 5.4 %, so ±30 % is
 * over five of them).
 * Control: without the code log's inlining (MIMALLOC_PPROF_TEST_NO_INLINE=1) rememberItem is not
 * in the first three rows, and a caller is, at the rate (handleItem, or the request handler that
 * TurboFan inlined handleItem into): its memory charged to the caller.
 * The control is the premise too: were rememberItem not inlined (by TurboFan, or by Maglev
 * from Node 22 on), it would be a frame of its own without the log, and named.
 */
import { join } from 'node:path';
import { test } from 'node:test';

import { root } from '../helpers.js';
import { driveItems, growthEndToEnd, type Service } from './growth-e2e.js';

const RATE = 250;
const SECONDS = 11;

const service: Service = {
  app: join(root, 'test', 'cli', 'fixtures', 'leaky-http-inlined.mjs'),
  fn: 'rememberItem',
  line: 10,
  kept: 16 * 4096,
  seconds: SECONDS,
  drive: (port) => driveItems(port, RATE, SECONDS),
};

test("a leaking function TurboFan inlined into its caller: growth's first 3 rows name it with file:line at its rate (±30 %)", async () => {
  await growthEndToEnd(service);
});

test('control: without the inlining from V8\'s code log (MIMALLOC_PPROF_TEST_NO_INLINE=1) the inlined function is not in the first 3 rows: a caller is, at its rate', async () => {
  // handleItem, or the request handler TurboFan inlined handleItem into (serve-items.mjs)
  const server = join(root, 'test', 'cli', 'fixtures', 'serve-items.mjs');
  await growthEndToEnd({
    ...service,
    env: { MIMALLOC_PPROF_TEST_NO_INLINE: '1' },
    instead: [
      { fn: 'handleItem', app: service.app, line: 16 },
      { fn: '(anonymous)', app: server, line: 8 },
    ],
  });
});
