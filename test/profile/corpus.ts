/**
 * A seeded corpus of malformed, truncated and oversized profile inputs, derived by mutation
 * from a few valid ones (raw proto, gzipped proto, heap_v2 text, gzipped text). The same
 * seed gives the same inputs; each input records the mutation that made it.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';

import { Profile as PProfile } from '../../src/profile/pprof.js';

import { encodeHeapText } from '../../src/profile/heap-text.js';
import { encodeProfile } from '../../src/profile/proto.js';
import { demoProfile, makeProfile, profileFixtures, rng } from './util.js';

export interface FuzzInput {
  kind: string;
  data: Uint8Array;
}

type Rand = () => number;
const int = (r: Rand, n: number) => Math.floor(r() * n);
const pick = <T>(r: Rand, xs: readonly T[]): T => xs[int(r, xs.length)]!;

const WORKED = `heap profile: 9: 1049088 [11: 1049216] @ heap_v2/524288
 8: 512 [10: 640] @ 0x0040114e 0x00401173 0x004011bb
 1: 1048576 [1: 1048576] @ 0x0040114e 0x004011a8 0x004011c0

# mimalloc heap stats
# sample_interval: 524288

MAPPED_LIBRARIES:
00400000-00401000 r--p 00000000 08:01 1234 /tmp/demo_nopie
00401000-00402000 r-xp 00001000 08:01 1234 /tmp/demo_nopie
7f0000000000-7f0000100000 r-xp 00028000 08:01 77 /usr/lib/libc.so.6
`;

interface Seed {
  name: string;
  kind: 'proto' | 'text';
  data: Uint8Array;
}

function seeds(): Seed[] {
  const symbolised = makeProfile({
    types: [['inuse_objects', 'count'], ['inuse_space', 'bytes']],
    mappings: [{ start: 0x400000, limit: 0x500000, offset: 0, file: '/bin/app', buildId: 'feed' }],
    samples: [
      { stack: ['leaf', 'mid', 'main'], values: [3, 3000], labels: [{ key: 'thread', str: 'w' }, { key: 'bytes', num: 1000, unit: 'bytes' }] },
      { stack: [0x400100, 'main'], values: [-2, -2000n] },
      { stack: [], values: [2n ** 62n, 1] },
    ],
    comments: ['c1', 'c2'],
    defaultType: 'inuse_space',
  });
  return [
    { name: 'demo.pb', kind: 'proto', data: encodeProfile(demoProfile(), { gzip: false }) },
    { name: 'native.pb', kind: 'proto', data: readFileSync(join(profileFixtures, 'ls-accum.pb')) },
    { name: 'symbolised.pb', kind: 'proto', data: encodeProfile(symbolised, { gzip: false }) },
    { name: 'native.heap', kind: 'text', data: readFileSync(join(profileFixtures, 'ls-accum.heap')) },
    { name: 'worked.heap', kind: 'text', data: Buffer.from(WORKED, 'latin1') },
    { name: 'demo.heap', kind: 'text', data: Buffer.from(encodeHeapText(demoProfile()), 'latin1') },
  ];
}

// ---------------------------------------------------------------------------------------
// proto structure, for boundary-aware mutations

interface Field {
  tagAt: number;
  lenAt: number; // -1 unless length-delimited
  start: number; // payload start
  end: number; // field end
}

/** The fields of a well-formed message, nested ones included (best effort, no validation). */
function protoFields(b: Uint8Array, from = 0, to = b.length, depth = 0, out: Field[] = []): Field[] {
  let p = from;
  const varint = (): number => {
    let x = 0;
    let m = 1;
    while (p < to) {
      const c = b[p++]!;
      x += (c & 0x7f) * m;
      m *= 128;
      if (c < 0x80) break;
    }
    return x;
  };
  while (p < to) {
    const tagAt = p;
    const tag = varint();
    const wire = tag % 8;
    if (wire === 0) {
      const start = p;
      varint();
      out.push({ tagAt, lenAt: -1, start, end: p });
    } else if (wire === 2) {
      const lenAt = p;
      const len = varint();
      const start = p;
      const end = Math.min(to, p + len);
      out.push({ tagAt, lenAt, start, end });
      const field = Math.floor(tag / 8);
      if (depth < 2 && [1, 2, 3, 4, 5, 11].includes(field)) protoFields(b, start, end, depth + 1, out);
      p = end;
    } else break;
  }
  return out;
}

function varintBytes(v: bigint): number[] {
  const out: number[] = [];
  let x = BigInt.asUintN(64, v);
  while (x >= 0x80n) {
    out.push(Number(x & 0x7fn) | 0x80);
    x >>= 7n;
  }
  out.push(Number(x));
  return out;
}

const concat = (...parts: (Uint8Array | number[])[]) => Buffer.concat(parts.map((p) => Buffer.from(p)));

// ---------------------------------------------------------------------------------------
// mutators

type Mutator = (r: Rand, s: Seed) => Uint8Array;

const generic: Record<string, Mutator> = {
  truncate: (r, s) => s.data.subarray(0, int(r, s.data.length)),
  bitflip: (r, s) => {
    const b = Buffer.from(s.data);
    for (let k = 1 + int(r, 8); k > 0; k--) {
      const i = int(r, b.length);
      b[i]! ^= 1 << int(r, 8);
    }
    return b;
  },
  byteset: (r, s) => {
    const b = Buffer.from(s.data);
    for (let k = 1 + int(r, 4); k > 0; k--) b[int(r, b.length)] = pick(r, [0x00, 0xff, 0x80, 0x7f, 0x0a, 0x20, int(r, 256)]);
    return b;
  },
  insert: (r, s) => {
    const i = int(r, s.data.length + 1);
    const chunk = Buffer.alloc(1 + int(r, 64));
    for (let k = 0; k < chunk.length; k++) chunk[k] = int(r, 256);
    return concat(s.data.subarray(0, i), chunk, s.data.subarray(i));
  },
  delete: (r, s) => {
    const i = int(r, s.data.length);
    return concat(s.data.subarray(0, i), s.data.subarray(Math.min(s.data.length, i + 1 + int(r, 256))));
  },
  duplicate: (r, s) => {
    const i = int(r, s.data.length);
    const chunk = s.data.subarray(i, Math.min(s.data.length, i + 1 + int(r, 64)));
    const times = pick(r, [2, 3, 10, 100, 1000]);
    return concat(s.data.subarray(0, i), ...Array.from({ length: times }, () => chunk), s.data.subarray(i));
  },
};

const protoMutators: Record<string, Mutator> = {
  'truncate at a field boundary': (r, s) => {
    const f = pick(r, protoFields(s.data));
    return s.data.subarray(0, pick(r, [f.tagAt, f.tagAt + 1, f.start, f.end - 1, f.lenAt >= 0 ? f.lenAt + 1 : f.start]));
  },
  'huge length': (r, s) => {
    const ld = protoFields(s.data).filter((f) => f.lenAt >= 0);
    const f = pick(r, ld);
    const huge = pick(r, [2n ** 31n, 2n ** 32n - 1n, 2n ** 53n + 1n, 2n ** 63n, 2n ** 64n - 1n, BigInt(s.data.length)]);
    return concat(s.data.subarray(0, f.lenAt), varintBytes(huge), s.data.subarray(f.start));
  },
  'overlong varint': (r, s) => {
    const f = pick(r, protoFields(s.data));
    const at = pick(r, [f.tagAt, f.lenAt >= 0 ? f.lenAt : f.start]);
    return concat(s.data.subarray(0, at), Array(10 + int(r, 3)).fill(0xff), [0x01], s.data.subarray(at));
  },
  'negative numbers': (r, s) => {
    const vs = protoFields(s.data).filter((f) => f.lenAt < 0);
    if (vs.length === 0) return s.data;
    const f = pick(r, vs);
    const v = pick(r, [-1n, -(2n ** 31n), -(2n ** 63n), 2n ** 63n - 1n, 2n ** 64n - 1n, -5n]);
    return concat(s.data.subarray(0, f.start), varintBytes(v), s.data.subarray(f.end));
  },
  'wrong wire type': (r, s) => {
    const f = pick(r, protoFields(s.data));
    const b = Buffer.from(s.data);
    b[f.tagAt] = (b[f.tagAt]! & ~7) | pick(r, [0, 1, 2, 3, 4, 5, 6, 7]);
    return b;
  },
  'field number': (r, s) => {
    const f = pick(r, protoFields(s.data));
    const b = Buffer.from(s.data);
    b[f.tagAt] = (int(r, 16) << 3) | (b[f.tagAt]! & 7);
    return b;
  },
  'repeated-field bomb': (r, s) => {
    const tops = protoFields(s.data, 0, s.data.length, 2).filter((f) => f.lenAt >= 0);
    const f = pick(r, tops);
    const one = s.data.subarray(f.tagAt, f.end);
    const times = pick(r, [1000, 5000, 20000]);
    return concat(s.data, ...Array.from({ length: times }, () => one));
  },
  'packed bomb': (r, s) => {
    const n = pick(r, [10000, 100000, 300000]);
    const ids = Buffer.alloc(n, 0x01); // n × location id 1
    const values = Array(pick(r, [2, 4])).fill(0x02); // as many values of 2 as the seeds have types
    const inner = concat([0x0a], varintBytes(BigInt(n)), ids, [0x12, values.length], values);
    return concat(s.data, [0x12], varintBytes(BigInt(inner.length)), inner);
  },
  'model field': (r, s) => {
    // a valid wire encoding of an invalid model: a random id, index or count goes wrong
    const p = PProfile.decode(s.data);
    const v = pick(r, [0, 1, 2, -1, 7, 1000, 2 ** 31, 2n ** 53n + 1n, -(2n ** 63n), 2n ** 64n - 1n] as (number | bigint)[]);
    const objs: Record<string, unknown>[] = [
      ...p.sample.map((x) => x as unknown as Record<string, unknown>),
      ...p.sample.flatMap((x) => x.label as unknown as Record<string, unknown>[]),
      ...p.location.map((x) => x as unknown as Record<string, unknown>),
      ...p.location.flatMap((x) => x.line as unknown as Record<string, unknown>[]),
      ...p.function.map((x) => x as unknown as Record<string, unknown>),
      ...p.mapping.map((x) => x as unknown as Record<string, unknown>),
      ...p.sampleType.map((x) => x as unknown as Record<string, unknown>),
      p as unknown as Record<string, unknown>,
    ];
    const o = pick(r, objs);
    const keys = Object.keys(o).filter((k) => typeof o[k] === 'number' || typeof o[k] === 'bigint' || Array.isArray(o[k]));
    if (keys.length === 0) return s.data;
    const k = pick(r, keys);
    const cur = o[k];
    if (Array.isArray(cur)) {
      if (cur.length > 0 && typeof cur[0] !== 'object') {
        if (r() < 0.5) cur.pop();
        else cur.push(v);
      }
    } else o[k] = v;
    try {
      return p.encode();
    } catch {
      return s.data;
    }
  },
};

const textMutators: Record<string, Mutator> = {
  'truncate at a line boundary': (r, s) => {
    const nl: number[] = [];
    for (let i = 0; i < s.data.length; i++) if (s.data[i] === 10) nl.push(i);
    const at = pick(r, nl);
    return s.data.subarray(0, pick(r, [at, at + 1, Math.max(0, at - 1), at + 2]));
  },
  'number token': (r, s) => {
    const t = Buffer.from(s.data).toString('latin1');
    const nums = [...t.matchAll(/-?\d+/g)];
    const m = pick(r, nums);
    const tok = pick(r, ['-5', 'NaN', 'Infinity', '1e309', '99999999999999999999', '-0', '0x', '', '00000000000000000000000001', '9223372036854775807', '-9223372036854775808', '18446744073709551616', '4611686018427387904', '0', ' ', '+1', '1.5']);
    return Buffer.from(t.slice(0, m.index) + tok + t.slice(m.index! + m[0].length), 'latin1');
  },
  'uppercase hex': (r, s) => {
    const t = Buffer.from(s.data).toString('latin1');
    const lines = t.split('\n');
    const i = int(r, lines.length);
    lines[i] = lines[i]!.replace(/0x[0-9a-f]+/g, (h) => `0x${h.slice(2).toUpperCase()}`).replace(/^[0-9a-f]+-[0-9a-f]+/, (x) => x.toUpperCase());
    return Buffer.from(lines.join('\n'), 'latin1');
  },
  header: (r, s) => {
    const t = Buffer.from(s.data).toString('latin1');
    const nl = t.indexOf('\n');
    const rest = t.slice(nl + 1);
    const head = pick(r, [
      '',
      '# heap profile: 1: 1 [1: 1] @ heap_v2/1',
      'heap profile: 1: 1 [1: 1] @ heap_v3/524288',
      'heap profile: 1: 1 [1: 1] @ heap/524288',
      'heap profile: 1: 1 [1: 1] @ heapprofile',
      'heap profile: 1: 1 [1: 1] @ heapz_v2/0',
      'heap profile: 1: 1 [2: 2] @ heap_v2/1',
      'heap profile: 1: 1 [2: 2] @ heap_v2/99999999999999999999',
      'heap profile: 1: 1 [2: 2] @ heap_v2/4611686018427387904',
      'heap profile: 1: 1 [2: 2] @ heap_v2/-1',
      'heap profile: 1: 1 [1: 1] @ growthz',
      'heap profile: 1: 1 [1: 1] @ fragmentationz',
      'xx heap profile: 1: 1 heap profile: 3: 4 [5: 6] @ heap_v2/2',
      `heap profile: ${'9'.repeat(40)}: 1 [1: 1] @ heap_v2/524288`,
      'HEAP PROFILE: 1: 1 [1: 1] @ HEAP_V2/524288',
    ]);
    return Buffer.from(r() < 0.2 ? `${head}\n${t}` : `${head}\n${rest}`, 'latin1');
  },
  'long line': (r, s) => {
    const t = Buffer.from(s.data).toString('latin1');
    const lines = t.split('\n');
    const n = pick(r, [65534, 65535, 65536, 70000, 200000]);
    const line = pick(r, [` 1: 64 [1: 64] @${' 0x1000'.repeat(Math.ceil(n / 7))}`.slice(0, n), `#${'x'.repeat(n)}`, `${'1'.repeat(n)}`, `0-1 r-xp 0 0:0 0 /${'a'.repeat(n)}`]);
    lines.splice(1 + int(r, lines.length - 1), 0, line);
    return Buffer.from(lines.join('\n'), 'latin1');
  },
  'odd lines': (r, s) => {
    const t = Buffer.from(s.data).toString('latin1');
    const lines = t.split('\n');
    const odd = pick(r, [
      '',
      '#',
      '   # comment',
      '\u0000\u0000',
      '\u00ff\u00fe invalid utf-8',
      '\u00c2\u00a0 1: 1 [1: 1] @ 0x1',
      ' 0: 512 [0: 0] @ 0x1000',
      ' 1: 64 [1: 64] 0x1000',
      ' 1: 64 [1: 64 @ 0x1000',
      ' 1 64 [1 64] @ 0x1000',
      ' 1: 64 [1: 64] @ 0x1ffffffffffffffff',
      ' 1: 64 [1: 64] @ 0x 0xx 0x0 x0x1',
      ' -1: 64 [1: 64] @ 0x1000',
      ' 1: 64 [-1: 64] @ 0x1000',
      ' 1: 64 [1: 64] @ 0xffffffffffffffff',
      `${' 1: 64 [1: 64] @'}${' 0x1234567'.repeat(3000)}`,
      'MAPPED_LIBRARIES:',
      '--- Memory map: ---',
      '0x1000-0x2000 r-xp 0 08:01 1 /dir with space/app',
      '1000-2000 rw-p 00000000 08:01 1 /data',
      'ffffffffffffffffff-1 r-xp 0 0:0 0 /x',
      '1000-2000 r-xp /lib/libz.so.1 (@10) cafe',
      '1000-2000 r-xp /lib/libz.so.1 (@zz) not-hex',
      'key=value',
      'I0101 00:00:00 x.cc:1] 1000-3000 r-xp 0 0:0 0 /y',
      'cafe=1',
      '/anon_hugepage',
      '1000 2000',
      '1000-0 r-xp 0 0:0 0 /inverted',
    ]);
    lines.splice(int(r, lines.length + 1), 0, odd);
    return Buffer.from(lines.join('\n'), 'latin1');
  },
  crlf: (_r, s) => Buffer.from(Buffer.from(s.data).toString('latin1').replace(/\n/g, '\r\n'), 'latin1'),
  'many rows': (r, s) => {
    const t = Buffer.from(s.data).toString('latin1');
    const lines = t.split('\n');
    const row = lines.find((l) => l.includes('@ 0x')) ?? ' 1: 64 [1: 64] @ 0x1000';
    const times = pick(r, [1000, 3000, 10000]);
    return Buffer.from([lines[0], ...Array(times).fill(row), ...lines.slice(1)].join('\n'), 'latin1');
  },
};

/** Bombs are costly to compress: made once per shape. */
const bombs = new Map<string, Uint8Array>();

const gzipMutators: Record<string, (r: Rand, s: Seed, inner: () => Uint8Array) => Uint8Array> = {
  'gzip of a mutant': (_r, _s, inner) => gzipSync(inner()),
  'gzip truncated': (r, s) => {
    const gz = gzipSync(s.data);
    return gz.subarray(0, pick(r, [2, 3, 9, 10, 11, gz.length - 8, gz.length - 4, gz.length - 1, int(r, gz.length)]));
  },
  'gzip corrupted': (r, s) => {
    const gz = Buffer.from(gzipSync(s.data));
    const i = pick(r, [3, 4, 9, gz.length - 8, gz.length - 5, gz.length - 2, 10 + int(r, Math.max(1, gz.length - 18))]);
    gz[i]! ^= 1 << int(r, 8);
    return gz;
  },
  'gzip bomb': (r, s) => {
    const n = pick(r, [2 << 20, 8 << 20, 16 << 20]);
    const fill = pick(r, [0x00, 0x0a, 0x23, 0x31]);
    const head = r() < 0.5 ? 64 : 0;
    const key = `${s.name}/${n}/${fill}/${head}`;
    let bomb = bombs.get(key);
    if (!bomb) {
      bomb = gzipSync(concat(s.data.subarray(0, head), Buffer.alloc(n, fill)), { level: 1 });
      bombs.set(key, bomb);
    }
    return bomb;
  },
  'gzip members': (_r, s) => {
    const half = Math.floor(s.data.length / 2);
    return concat(gzipSync(s.data.subarray(0, half)), gzipSync(s.data.subarray(half)));
  },
  'gzip of gzip': (_r, s) => gzipSync(gzipSync(s.data)),
  'gzip trailing junk': (r, s) => concat(gzipSync(s.data), Buffer.alloc(1 + int(r, 16), 0x41)),
};

/** `count` inputs from seed `seed`. Oversized kinds (bombs) are kept to a small share. */
export function* corpus(count: number, seed = 20260101): Generator<FuzzInput> {
  const r = rng(seed);
  const all = seeds();
  const bigKinds = new Set(['gzip bomb', 'repeated-field bomb', 'packed bomb', 'many rows']);
  for (let i = 0; i < count; i++) {
    const s = pick(r, all);
    const own = s.kind === 'proto' ? protoMutators : textMutators;
    const mutate = (x: Seed): Uint8Array => {
      const table = r() < 0.5 ? generic : own;
      let name = pick(r, Object.keys(table));
      if (bigKinds.has(name) && r() < 0.9) name = 'truncate';
      return (table[name] ?? generic.truncate!)(r, x);
    };
    const roll = r();
    if (roll < 0.08) {
      let name = pick(r, Object.keys(gzipMutators));
      if (name === 'gzip bomb' && r() < 0.8) name = 'gzip truncated';
      const inner = () => {
        try {
          return mutate(s);
        } catch {
          return generic.truncate!(r, s);
        }
      };
      yield { kind: `${s.name}: ${name}`, data: gzipMutators[name]!(r, s, inner) };
      continue;
    }
    // one mutation, sometimes two or three stacked
    let data = s.data;
    const kinds: string[] = [];
    for (let k = roll < 0.7 ? 1 : roll < 0.9 ? 2 : 3; k > 0; k--) {
      const table = r() < 0.5 ? generic : own;
      let name = pick(r, Object.keys(table));
      if (bigKinds.has(name) && r() < 0.9) name = 'bitflip';
      const fn = table[name]!;
      try {
        data = fn(r, { ...s, data });
      } catch {
        // a structural mutator may not apply to an already damaged input
        data = generic.truncate!(r, { ...s, data });
        name = 'truncate';
      }
      kinds.push(name);
    }
    yield { kind: `${s.name}: ${kinds.join(' + ')}`, data };
  }
}
