/**
 * coild's API side without its kernel side, for counting what it costs the API server: the
 * runtime's Cache with the kinds and selectors coild caches (src/node-agent/rbac.ts COILD_ACCESS,
 * from coild's own flags), on one ApiTransport as coild's Manager builds it, plus a live GET of
 * its Node every 200 ms (coild's requests besides the watches). Runs on Node and on Bun (coild's
 * runtime).
 *
 * Usage: node|bun dist/test/support/coild-api-client.js [coild flags…]  (COIL_NODE_NAME set)
 * Prints one JSON line per fact: `{"synced":true}` once every informer has listed, then
 * `{"event":"ADDED","kind":"Pod","name":"…"}` per cache event; stops when stdin closes.
 */
import { Kinds } from '../../src/api/v2/kinds.js';
import { COILD_ACCESS, coildFeatures } from '../../src/node-agent/rbac.js';
import { parseConfig } from '../../src/node-agent/config.js';
import { ApiTransport } from '../../src/runtime/api-transport.js';
import { Cache } from '../../src/runtime/cache.js';
import { Client } from '../../src/runtime/client.js';
import { createLogger } from '../../src/runtime/logging.js';
import { loadKubeConfig } from '../../src/runtime/program.js';

const cfg = parseConfig(process.argv.slice(2), process.env);
const log = createLogger({ name: 'coild-api-client', level: 'warn' });
const transport = new ApiTransport(loadKubeConfig(cfg.kubeconfig), { http2: cfg.apiHttp2 });
const cache = new Cache(transport, log);
const client = new Client(transport, 'coild-api-client');
const say = (fact: object): void => void process.stdout.write(JSON.stringify(fact) + '\n');
for (const feature of coildFeatures(cfg)) {
  for (const c of COILD_ACCESS[feature].caches) {
    cache.ensure(c.kind, c.options?.(cfg));
    cache.onEvent(c.kind, (e) => say({ event: e.type, kind: c.kind.kind, name: e.object.metadata?.name }));
  }
}
cache.start();
await cache.waitForSync();
say({ synced: true, kinds: cache.kinds().length });
const poll = setInterval(() => void client.get(Kinds.Node, { name: cfg.nodeName }).catch(() => undefined), 200);
process.stdin.on('end', () => {
  clearInterval(poll);
  void cache.stop().then(() => process.exit(0));
}).resume();
