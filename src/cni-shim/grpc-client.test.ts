import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { readResponse, unaryCall } from './grpc-client.js';
import { PluginError } from './plugin-error.js';

const dir = mkdtempSync(join(tmpdir(), 'coil-grpc-client-'));
after(() => rmSync(dir, { recursive: true, force: true }));

/** A UNIX socket server that hands each connection to `onConnection`. */
async function listen(name: string, onConnection: (s: Socket) => void): Promise<{ path: string; server: Server }> {
  const path = join(dir, name);
  const server = createServer(onConnection);
  await new Promise<void>((resolve) => server.listen(path, resolve));
  return { path, server };
}

function isCode(code: number): (e: unknown) => boolean {
  return (e) => e instanceof PluginError && e.code === code;
}

describe('unaryCall', () => {
  it('a coild that accepts but never answers times out with code 11', async () => {
    const open: Socket[] = [];
    const { path, server } = await listen('silent.sock', (s) => open.push(s));
    try {
      const started = Date.now();
      await assert.rejects(unaryCall({ socketPath: path, method: '/pkg.cnirpc.CNI/Add', request: Buffer.alloc(0), timeoutMs: 200 }), isCode(11));
      assert.ok(Date.now() - started < 2_000);
    } finally {
      for (const s of open) s.destroy();
      server.close();
    }
  });

  it('a coild that closes the connection before answering is code 11', async () => {
    const { path, server } = await listen('closing.sock', (s) => s.destroy());
    try {
      await assert.rejects(unaryCall({ socketPath: path, method: '/pkg.cnirpc.CNI/Del', request: Buffer.alloc(0), timeoutMs: 5_000 }), isCode(11));
    } finally {
      server.close();
    }
  });
});

describe('readResponse', () => {
  const ok = { ':status': '200', 'content-type': 'application/grpc' };

  it('returns the one length-prefixed message of an OK response', () => {
    const body = Buffer.from([0, 0, 0, 0, 2, 0x0a, 0x00]);
    assert.deepEqual(readResponse(ok, { 'grpc-status': '0' }, body), Buffer.from([0x0a, 0x00]));
  });

  it('reads grpc-status from the headers of a trailers-only response', () => {
    assert.throws(() => readResponse({ ...ok, 'grpc-status': '13', 'grpc-message': 'boom%20here' }, {}, Buffer.alloc(0)), (e: unknown) => {
      return e instanceof PluginError && e.code === 999 && e.message === 'boom here';
    });
  });

  it('gRPC Unavailable without a CNIError detail is code 11', () => {
    assert.throws(() => readResponse(ok, { 'grpc-status': '14' }, Buffer.alloc(0)), isCode(11));
  });

  it('a response without any gRPC status is code 999', () => {
    assert.throws(() => readResponse({ ':status': '502' }, {}, Buffer.alloc(0)), isCode(999));
  });

  it('a detail that is not a CNIError is ignored, not dereferenced (a bug in Coil: docs/compatibility.md#the-cni-executable)', () => {
    // google.rpc.Status{code=13, details=[Any{type_url="type.googleapis.com/x.Other"}]}
    const typeUrl = Buffer.from('type.googleapis.com/x.Other');
    const any = Buffer.concat([Buffer.from([0x0a, typeUrl.length]), typeUrl]);
    const status = Buffer.concat([Buffer.from([0x08, 13, 0x1a, any.length]), any]);
    const trailers = { 'grpc-status': '13', 'grpc-message': 'other', 'grpc-status-details-bin': status.toString('base64') };
    assert.throws(() => readResponse(ok, trailers, Buffer.alloc(0)), isCode(999));
  });

  it('decodes a CNIError detail whether its base64 is padded or not', () => {
    const len = (b: Buffer): Buffer => Buffer.from([b.length]);
    const msg = Buffer.from('no such pool x');
    const cniError = Buffer.concat([Buffer.from([0x08, 7, 0x12]), len(msg), msg]);
    const typeUrl = Buffer.from('type.googleapis.com/pkg.cnirpc.CNIError');
    const any = Buffer.concat([Buffer.from([0x0a]), len(typeUrl), typeUrl, Buffer.from([0x12]), len(cniError), cniError]);
    const status = Buffer.concat([Buffer.from([0x08, 13, 0x1a]), len(any), any]);
    const padded = status.toString('base64');
    assert.ok(padded.endsWith('='), 'the sample must need padding');
    for (const bin of [padded, padded.replace(/=+$/, '')]) {
      assert.throws(() => readResponse(ok, { 'grpc-status': '13', 'grpc-status-details-bin': bin }, Buffer.alloc(0)), (e: unknown) => {
        return e instanceof PluginError && e.code === 7 && e.message === 'no such pool x';
      });
    }
  });
});
