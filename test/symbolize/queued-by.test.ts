/**
 * The symbolizer's handling of "[queued by]" stacks (native/src/pool.c): a promise
 * continuation that resumed inside a pool completion's microtask checkpoint is not charged to
 * the code that queued the work (the stack ends at the marker after the part that ran
 * microtasks), while a completion's own callback keeps its queuing stack (the control); the
 * thread kind is read below the first marker.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { symbolize } from '../../src/symbolize/index.js';
import { makeProfile } from '../profile/util.js';

const names = (p: ReturnType<typeof makeProfile>, i: number) => {
  const str = (x: number | bigint) => p.stringTable.strings[Number(x)] ?? '';
  const fn = new Map(p.function.map((f) => [Number(f.id), str(f.name)]));
  const loc = new Map(p.location.map((l) => [Number(l.id), fn.get(Number(l.line[0]!.functionId))]));
  return p.sample[i]!.locationId.map((id) => loc.get(Number(id)));
};

test('a continuation resumed by microtasks loses the queuing stack; a completion callback keeps it', () => {
  const resumed = ['allocUnsafeSlow', 'loadBigFile', 'Builtins_AsyncFunctionAwaitResolveClosure', 'Builtins_RunMicrotasks', 'node::InternalCallbackScope::Close()', '[queued by]', 'pbkdf2', 'hashPasswords'];
  const callback = ['allocUnsafeSlow', 'readFileAfterStat', 'node::InternalMakeCallback()', '[queued by]', 'uv_fs_fstat', 'readFileAfterOpen', '[queued by]', 'readFile', 'loadBigFile'];
  const chained = ['allocUnsafeSlow', 'readFileAfterStat', '[queued by]', 'readFile', 'loadBigFile', 'Builtins_RunMicrotasks', '[queued by]', 'pbkdf2', 'hashPasswords'];
  const p = makeProfile({ samples: [resumed, callback, chained].map((stack) => ({ stack, values: [0, 0, 1, 100] })) });
  symbolize(p, {});
  assert.deepEqual(names(p, 0), resumed.slice(0, 5));
  assert.deepEqual(names(p, 1), callback, 'the control: no microtasks, the whole chain');
  assert.deepEqual(names(p, 2), chained.slice(0, 6), 'cut at the marker after the part that ran microtasks');
});
