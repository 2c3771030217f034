import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { KubeConfig, type KubernetesObject } from '@kubernetes/client-node';

/** One scripted list answer: a status code to fail with, or items and the list resourceVersion. */
export type FakeListAnswer = number | { readonly items: KubernetesObject[]; readonly rv: string };

/**
 * One scripted watch: send a 410 Gone ERROR event; stay silent (headers never even flushed); or
 * `open`: accept it, send one MODIFIED event of object `a` at resourceVersion `w<n>` (n: the
 * watch's ordinal, so a test sees it arrive), and keep it open until {@link FakeApiServer.cutWatches}.
 */
export type FakeWatchAnswer = 'gone' | 'silent' | 'open';

/**
 * A scripted stand-in for the API server's list and watch endpoints, for the informer recovery
 * paths a real kube-apiserver cannot be made to take on demand (410 in mid-watch, a watch that
 * goes silent, failing lists). Everything else is tested against the real one in test/envtest.
 *
 * Each request consumes one scripted answer; the last answer repeats. Plain HTTP on 127.0.0.1.
 */
export class FakeApiServer {
  private server: Server | undefined;
  private readonly open = new Set<ServerResponse>();
  private lists: FakeListAnswer[] = [];
  private watches: FakeWatchAnswer[] = [];
  /** Lists served since the last {@link play}. */
  listCount = 0;
  /** resourceVersion of each watch since the last {@link play}. */
  watchRVs: string[] = [];

  /** Sets the answers of the next requests and resets the counters. */
  play(lists: FakeListAnswer[], watches: FakeWatchAnswer[]): void {
    this.lists = lists;
    this.watches = watches;
    this.listCount = 0;
    this.watchRVs = [];
  }

  /** Listens on a random port. @returns a KubeConfig pointing at it */
  async start(): Promise<KubeConfig> {
    const server = createServer((req, res) => {
      const url = new URL(req.url ?? '/', 'http://localhost');
      if (url.searchParams.get('watch') === 'true') {
        this.watchRVs.push(url.searchParams.get('resourceVersion') ?? '');
        res.writeHead(200, { 'content-type': 'application/json' });
        this.open.add(res);
        res.on('close', () => this.open.delete(res));
        const answer = next(this.watches);
        if (answer === 'open') res.write(JSON.stringify({ type: 'MODIFIED', object: { metadata: { name: 'a', resourceVersion: `w${this.watchRVs.length}` } } }) + '\n');
        if (answer === 'gone') res.write(JSON.stringify({ type: 'ERROR', object: { kind: 'Status', code: 410, reason: 'Expired', message: 'too old resource version' } }) + '\n');
        return;
      }
      this.listCount++;
      const answer = next(this.lists);
      if (typeof answer === 'number') {
        res.writeHead(answer, { 'content-type': 'application/json' }).end(JSON.stringify({ kind: 'Status', code: answer, message: 'scripted failure' }));
      } else {
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ kind: 'List', metadata: { resourceVersion: answer.rv }, items: answer.items }));
      }
    });
    this.server = server;
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const kc = new KubeConfig();
    kc.loadFromOptions({
      // client-node 2.x refuses plain HTTP unless TLS verification is explicitly skipped.
      clusters: [{ name: 'fake', server: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, skipTLSVerify: true }],
      users: [{ name: 'fake' }],
      contexts: [{ name: 'fake', cluster: 'fake', user: 'fake' }],
      currentContext: 'fake',
    });
    return kc;
  }

  /** Breaks every open watch connection, as an apiserver restart does. */
  cutWatches(): void {
    for (const r of this.open) r.destroy();
  }

  /** Cuts open watches and stops listening. */
  async stop(): Promise<void> {
    for (const r of this.open) r.destroy();
    await new Promise((r) => this.server?.close(r));
  }
}

function next<T>(q: T[]): T {
  if (q.length === 0) throw new Error('FakeApiServer: nothing scripted');
  return q.length > 1 ? q.shift()! : q[0]!;
}
