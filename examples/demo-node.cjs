// The bundled Node demo: a "service" whose RSS grows while its JavaScript heap stays flat.
// Its native memory goes to a response cache of Buffers that nothing evicts, to gzip streams
// that are never closed; per-request scratch buffers are garbage, which the full collection
// that `run` makes before its exit profile frees (`run --no-gc` shows them too). The service's
// state is exported, so it stays reachable as a running service's would.
'use strict';
const zlib = require('node:zlib');

const cache = new Map();
const streams = [];
module.exports = { cache, streams };

function renderResponse(id) {
  return Buffer.from(JSON.stringify({ id, items: Array.from({ length: 40 + (id % 40) }, (_, i) => ({ i, label: `item ${i}` })) }));
}

function handleRequest(id) {
  const scratch = Buffer.allocUnsafeSlow(32 * 1024); // garbage after return, freed by a later GC
  scratch.fill(id & 0xff);
  if (!cache.has(id % 5000)) cache.set(id % 5000, renderResponse(id)); // the leak
}

async function openCompressor(id) {
  const gz = zlib.createGzip();
  gz.on('data', () => {});
  await new Promise((done) => gz.write(`stream ${id}`, done));
  streams.push(gz); // never ended
}

async function main() {
  for (let id = 0; id < 20000; id++) handleRequest(id);
  for (let id = 0; id < 30; id++) await openCompressor(id);
  const heap = process.memoryUsage();
  console.log(`demo: ${cache.size} cached responses, ${streams.length} open gzip streams; V8 heap ${(heap.heapUsed / 2 ** 20).toFixed(0)} MiB, RSS ${(heap.rss / 2 ** 20).toFixed(0)} MiB`);
}

main();
