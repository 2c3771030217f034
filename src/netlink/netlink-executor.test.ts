// NetlinkExecutor: its rtnetlink path with a scripted stand-in backend (the kernel cannot be made
// to answer EBUSY on demand); its real backends against ip in netlink-agent.test.ts and
// rtnetlink-dump.test.ts.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { NetlinkExecutor } from './netlink-executor.js';
import { NetlinkError } from './netlink-error.js';
import { rt, type RtBackend, type RtBatch, type RtBatchResult } from './rt-request.js';

describe('NetlinkExecutor.apply with an rtnetlink backend: typed failures', () => {
  /** A stand-in backend answering each call with the next scripted result; records what it was given. */
  const scripted = (answers: RtBatchResult[]): RtBackend & { calls: RtBatch[][] } => {
    const calls: RtBatch[][] = [];
    return { isUsable: true, calls, batches: async (list) => { calls.push([...list]); return [answers.shift() ?? { stderr: '', exitCode: 0, failures: [] }]; } };
  };
  const requests = [rt.linkSet('a', { up: true }), rt.linkSet('b', { up: true }), rt.linkSet('c', { up: true })];

  // The kernel's extended-ack text says nothing iproute2's wording would (no "File exists"): the
  // class comes from the errno the backend reports, never from its text.
  test('a refusal is classified by its errno, whatever its message (EEXIST with an extended ack)', async () => {
    const backend = scripted([{ stderr: 'Error: Nexthop id already in use.\nCommand failed -:2\n', exitCode: 1, failures: [{ line: 2, errno: 17, message: 'Error: Nexthop id already in use.' }] }]);
    const runner = new NetlinkExecutor({ rtnetlink: backend, retry: { attempts: 3, initialDelayMs: 1, maxDelayMs: 1 } });
    const err = await runner.apply(requests).then(() => undefined, (e: unknown) => e);
    assert.ok(err instanceof NetlinkError, String(err));
    assert.equal(err.errno, 'EEXIST');
    assert.equal(err.failedRequest, 2);
    assert.equal(backend.calls.length, 1, 'a permanent failure is not retried');
  });

  test('a transient errno (EBUSY) at request k is retried from request k, whatever its message', async () => {
    const backend = scripted([{ stderr: 'Error: busy elsewhere.\nCommand failed -:2\n', exitCode: 1, failures: [{ line: 2, errno: 16, message: 'Error: busy elsewhere.' }] }]);
    const runner = new NetlinkExecutor({ rtnetlink: backend, retry: { attempts: 3, initialDelayMs: 1, maxDelayMs: 1 } });
    await runner.apply(requests);
    assert.equal(backend.calls.length, 2);
    assert.deepEqual(backend.calls[1]![0]!.requests, requests.slice(1));
  });
});
