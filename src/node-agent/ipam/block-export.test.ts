// BlockExport as a Manager runnable: it syncs the export table once when run, follows the
// AddressBlock cache until its signal aborts, and then no block change reaches the table; a failed
// first sync fails the run (the Manager's backoff runs it again) and coild's start with it.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { Kinds } from '../../api/v2/kinds.js';
import { silentLogger } from '../../runtime/logging.js';
import { FakeCoildCache, fakeBlock } from '../../../test/fakes/coild-cache.fake.js';
import { BlockExport } from './block-export.js';
import type { RouteExportChange, RouteExporter } from './route-export.js';

/** A RouteExporter stand-in recording each desired set; `fail` makes the next sync throw. */
class RecordingExporter implements RouteExporter {
  readonly syncs: string[][] = [];
  fail: Error | undefined;
  async sync(desired: readonly string[]): Promise<RouteExportChange> {
    if (this.fail) {
      const err = this.fail;
      this.fail = undefined;
      throw err;
    }
    this.syncs.push([...desired].sort());
    return { added: [], deleted: [] };
  }
  clear(): Promise<RouteExportChange> {
    return this.sync([]);
  }
}

const settle = (): Promise<void> => new Promise((r) => setTimeout(r, 10));

describe('BlockExport.trigger', () => {
  test('a change triggered as a sync ends is synced, whatever turn it lands in', async () => {
    // The window between the sync's last look at its dirty mark and its end is a few microtasks
    // wide; a trigger is fired at each of them in turn.
    for (let ticks = 0; ticks < 12; ticks++) {
      const cache = new FakeCoildCache();
      const exporter = new RecordingExporter();
      let extra: string[] = [];
      const be = new BlockExport({ cache: cache.asCache(), exporter, logger: silentLogger(), extra: () => extra });
      be.trigger();
      for (let i = 0; i < ticks; i++) await Promise.resolve();
      extra = ['fd00:8::1/128'];
      be.trigger();
      await settle();
      assert.deepEqual(exporter.syncs.at(-1), ['fd00:8::1/128'], `a trigger ${ticks} microtask(s) after the sync started`);
    }
  });
});

describe('BlockExport as a Manager runnable', () => {
  test('syncs once when run, follows block events, and stops following when its signal aborts', async () => {
    const cache = new FakeCoildCache();
    cache.put(Kinds.AddressBlock, fakeBlock('p', 0, '10.8.0.0/27'));
    const exporter = new RecordingExporter();
    const be = new BlockExport({ cache: cache.asCache(), exporter, logger: silentLogger() });
    const abort = new AbortController();
    const run = be.run(abort.signal);
    await be.firstSync();
    assert.deepEqual(exporter.syncs, [['10.8.0.0/27']]);
    cache.emit(Kinds.AddressBlock, 'ADDED', fakeBlock('p', 1, '10.8.0.32/27'));
    await settle();
    assert.deepEqual(exporter.syncs.at(-1), ['10.8.0.0/27', '10.8.0.32/27']);
    abort.abort();
    await run;
    const count = exporter.syncs.length;
    cache.emit(Kinds.AddressBlock, 'ADDED', fakeBlock('p', 2, '10.8.0.64/27'));
    await be.syncUnlessStopped();
    await settle();
    assert.equal(exporter.syncs.length, count, 'a block change after the stop reached the export table');
  });

  test('a failed first sync fails the run and firstSync with its error', async () => {
    const exporter = new RecordingExporter();
    exporter.fail = new Error('RTNETLINK answers: Operation not permitted');
    const be = new BlockExport({ cache: new FakeCoildCache().asCache(), exporter, logger: silentLogger() });
    const abort = new AbortController();
    await assert.rejects(be.run(abort.signal), /Operation not permitted/);
    await assert.rejects(be.firstSync(), /Operation not permitted/);
    // The Manager runs it again after its backoff: that run syncs and follows the cache.
    const again = be.run(abort.signal);
    await settle();
    assert.deepEqual(exporter.syncs, [[]]);
    abort.abort();
    await again;
  });
});
