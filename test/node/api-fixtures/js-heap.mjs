// The JavaScript heap through the in-process API: start({ jsHeap: true }), then profile() with
// and without it, and /debug/pprof/heap with and without ?js=0. Run with --expose-gc; prints
// one JSON line with the raw profiles (base64) and V8's used-heap growth across retainObjects.
import { request } from 'node:http';
import v8 from 'node:v8';

const { profiler, serve } = await import(process.env.MPP_INDEX);
profiler.stop();
profiler.start({ interval: 65536, jsHeap: true });
globalThis.objects = [];
function retainObjects(count) {
  for (let i = 0; i < count; i++) globalThis.objects.push({ id: i, name: `n${i}`, pair: [i, i + 1] });
}
const used = () => {
  globalThis.gc();
  globalThis.gc();
  return v8.getHeapStatistics().used_heap_size;
};
const before = used();
retainObjects(480_000);
const objectBytes = used() - before;
const get = (port, path) =>
  new Promise((resolve, reject) => {
    request({ host: '127.0.0.1', port, path }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve(Buffer.concat(chunks).toString('base64')));
    })
      .on('error', reject)
      .end();
  });
const withJs = (await profiler.profile()).toString('base64');
const withoutJs = (await profiler.profile({ jsHeap: false })).toString('base64');
const server = await serve({ port: 0, host: '127.0.0.1' });
const port = server.port;
const http = await get(port, '/debug/pprof/heap');
const httpNoJs = await get(port, '/debug/pprof/heap?js=0');
await server.close();
console.log(JSON.stringify({ objectBytes, withJs, withoutJs, http, httpNoJs }));
