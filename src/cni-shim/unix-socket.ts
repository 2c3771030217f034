/**
 * A UNIX stream socket through the runtime's event loop, for when libc calls are not available
 * (the Bun executable uses them: grpc-client.ts `unaryCallSync`): `Bun.connect` in Bun (≈ 0.5 ms),
 * and under Node (unit tests, or a Node build) `node:net`, loaded on demand (importing it costs
 * the Bun executable ≈ 8 ms).
 *
 * @see docs/performance.md#the-cni-executables-start (measurements)
 */

/** Callbacks of an open connection. */
export interface ConnectionHandlers {
  /** Bytes received, in order. */
  onData(chunk: Uint8Array): void;
  /** The connection ended (peer close, or `err`); called at most once. */
  onClose(err?: Error): void;
}

/** An open connection. */
export interface UnixConnection {
  /** Queues bytes for sending, in order. */
  write(data: Uint8Array): void;
  /** Closes the connection without waiting for anything. */
  destroy(): void;
}

/** The subset of Bun's socket API used here (no @types/bun in this project). */
interface BunSocket {
  write(data: Uint8Array): number;
  end(): void;
}
interface BunLike {
  connect(options: {
    unix: string;
    socket: {
      data(s: BunSocket, chunk: Uint8Array): void;
      drain(s: BunSocket): void;
      close(s: BunSocket, err?: Error): void;
      error(s: BunSocket, err: Error): void;
    };
  }): Promise<BunSocket>;
}

/**
 * Connects to `path`.
 * @throws Error with the system `code` (ENOENT, ECONNREFUSED, EACCES…) when the connection fails.
 */
export function connectUnix(path: string, h: ConnectionHandlers): Promise<UnixConnection> {
  const bun = (globalThis as { Bun?: BunLike }).Bun;
  return bun ? connectBun(bun, path, h) : connectNode(path, h);
}

async function connectBun(bun: BunLike, path: string, h: ConnectionHandlers): Promise<UnixConnection> {
  // Bun's write() may take only part of the bytes; the rest waits for drain().
  let pending: Uint8Array[] = [];
  let closed = false;
  const close = (err?: Error): void => {
    if (closed) return;
    closed = true;
    h.onClose(err);
  };
  const flush = (s: BunSocket): void => {
    while (pending.length > 0) {
      const head = pending[0] as Uint8Array;
      const n = s.write(head);
      if (n < head.length) {
        pending[0] = head.subarray(Math.max(0, n));
        return;
      }
      pending.shift();
    }
  };
  const socket = await bun.connect({
    unix: path,
    socket: {
      data: (_s, chunk) => h.onData(chunk),
      drain: (s) => flush(s),
      close: (_s, err) => close(err),
      error: (_s, err) => close(err),
    },
  });
  return {
    write: (data) => {
      pending.push(data);
      if (pending.length === 1) flush(socket);
    },
    destroy: () => {
      pending = [];
      closed = true;
      socket.end();
    },
  };
}

async function connectNode(path: string, h: ConnectionHandlers): Promise<UnixConnection> {
  const net = await import('node:net');
  return new Promise((resolve, reject) => {
    const socket = net.connect(path);
    let connected = false;
    socket.once('connect', () => {
      connected = true;
      resolve({ write: (data) => void socket.write(data), destroy: () => socket.destroy() });
    });
    socket.on('data', (chunk: Buffer) => h.onData(chunk));
    socket.on('error', (err) => (connected ? h.onClose(err) : reject(err)));
    socket.on('close', () => connected && h.onClose());
  });
}
