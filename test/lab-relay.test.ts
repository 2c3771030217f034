/**
 * The lab's relays (hack/lab/relay.ts) on loopback: a client → tcpToUnix → UNIX socket →
 * unixToTcp → server chain, as a node's coild reaches the apiserver. A small request or answer
 * written in two pieces (an HTTP/2 HEADERS then DATA frame, a TLS record then the next) must not
 * wait for the first piece's ACK: with Nagle on a relay's TCP socket the second piece is held
 * until the peer's delayed ACK (≈ 40 ms on Linux), one stall per piece after the first.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { tcpToUnix, unixToTcp } from '../hack/lab/relay.js';

/** Gap between the two pieces of a message: long enough that the relay reads them apart. */
const GAP_MS = 2;
const ROUND_TRIPS = 15;

/** Writes `msg` in two pieces, `GAP_MS` apart. */
async function writeInTwo(s: Socket, msg: string): Promise<void> {
  s.write(msg.slice(0, 4));
  await sleep(GAP_MS);
  s.write(msg.slice(4));
}

/** Resolves with the next `n` bytes read from `s` (which must be paused in between). */
function readBytes(s: Socket, n: number): Promise<void> {
  return new Promise((resolve, reject) => {
    let got = 0;
    const onData = (b: Buffer) => {
      got += b.length;
      if (got >= n) {
        s.off('data', onData).off('error', reject);
        resolve();
      }
    };
    s.on('data', onData).once('error', reject);
  });
}

describe('the lab relay', () => {
  let dir: string;
  let server: Server;
  const relays: Server[] = [];
  let port: number;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'coil-relay-'));
    // The "apiserver": answers each 12-byte request with a 12-byte answer written in two pieces.
    server = createServer({ noDelay: true }, (s) => {
      let buf = 0;
      s.on('data', (b) => {
        buf += b.length;
        while (buf >= 12) {
          buf -= 12;
          void writeInTwo(s, 'answer-12by\n');
        }
      });
      s.on('error', () => {});
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const sock = join(dir, 'apiserver.sock');
    relays.push(await unixToTcp(sock, '127.0.0.1', (server.address() as AddressInfo).port));
    const front = await tcpToUnix('127.0.0.1', 0, sock);
    relays.push(front);
    port = (front.address() as AddressInfo).port;
  });

  after(async () => {
    for (const s of [...relays, server]) {
      s.close();
      (s as Server & { closeAllConnections?: () => void }).closeAllConnections?.();
    }
    await rm(dir, { recursive: true, force: true });
  });

  test('a small request and answer in two pieces each cross both relays without a delayed-ACK stall', async (t) => {
    const c = connect({ host: '127.0.0.1', port, noDelay: true });
    await once(c, 'connect');
    const times: number[] = [];
    try {
      for (let i = 0; i < ROUND_TRIPS; i++) {
        const t0 = performance.now();
        const answer = readBytes(c, 12);
        await writeInTwo(c, 'request-12b\n');
        await answer;
        times.push(performance.now() - t0);
      }
    } finally {
      c.destroy();
    }
    times.sort((a, b) => a - b);
    const median = times[Math.floor(times.length / 2)]!;
    t.diagnostic(`round trips (ms, sorted): ${times.map((x) => x.toFixed(1)).join(' ')}`);
    // Two gaps of GAP_MS per round trip; a Nagle stall adds ≈ 40 ms per piece held.
    assert.ok(median < 30, `median round trip ${median.toFixed(1)} ms: a relay holds the second piece for the first one's ACK (TCP_NODELAY off)`);
  });
});
