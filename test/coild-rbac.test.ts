/**
 * coild's ClusterRole in the chart against what coild does: for each way the chart runs it (IPAM
 * and egress, IPAM only, egress only), the kinds the chart lets it watch are exactly the kinds a
 * coild built with those flags caches — no informer left without access (its cache would never
 * sync), no watch granted that nothing uses — and it may list those and, with IPAM, its
 * BlockRequests (one list when the BlockRequester starts; they are not watched,
 * docs/performance.md#scale). Its other verbs are the calls its parts declare
 * (src/node-agent/rbac.ts), which generate the chart (test/generated.test.ts keeps the committed
 * file current).
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, test } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import { parse } from 'yaml';
import { Coild } from '../src/node-agent/coild.js';
import { parseConfig } from '../src/node-agent/config.js';
import { silentLogger } from '../src/runtime/logging.js';

const root = fileURLToPath(new URL('../../', import.meta.url));

interface PolicyRule {
  apiGroups: string[];
  resources: string[];
  verbs: string[];
}

/** The rules of the chart's `coild` ClusterRole with these switches (as templates/rbac.yaml concatenates them). */
async function chartRules(ipam: boolean, egress: boolean): Promise<PolicyRule[]> {
  const rbac = parse(await readFile(join(root, 'charts/coil/files/rbac.yaml'), 'utf8')) as { coild: Record<string, PolicyRule[]> };
  return [...rbac.coild.common!, ...(ipam ? rbac.coild.ipam! : []), ...(egress ? rbac.coild.egress! : [])];
}

/** `group/resource` of every rule granting `verb`. */
function granted(rules: readonly PolicyRule[], verb: string): string[] {
  return [...new Set(rules.filter((r) => r.verbs.includes(verb)).flatMap((r) => r.apiGroups.flatMap((g) => r.resources.map((res) => `${g}/${res}`))))].sort();
}

function kubeConfig(): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromOptions({ clusters: [{ name: 'c', server: 'https://127.0.0.1:1' }], users: [{ name: 'u' }], contexts: [{ name: 'x', cluster: 'c', user: 'u' }], currentContext: 'x' });
  return kc;
}

/** `group/plural` of every kind a coild with these switches caches (built, never started). */
function cachedBy(ipam: boolean, egress: boolean): string[] {
  const flags = [`--enable-ipam=${ipam}`, `--enable-egress=${egress}`, '--spawn-helper=false', '--netlink-agent=false', '--metrics-addr=0', '--health-addr=0'];
  const coild = new Coild({ config: parseConfig(flags, { COIL_NODE_NAME: 'n1' }), kubeConfig: kubeConfig(), logger: silentLogger() });
  return coild.manager.cache.kinds().map((k) => `${k.group}/${k.plural}`).sort();
}

describe("the chart's coild ClusterRole", () => {
  for (const [ipam, egress] of [[true, true], [true, false], [false, true]] as const) {
    test(`lets coild watch exactly what it caches, and list that and its BlockRequests (ipam ${ipam}, egress ${egress})`, async () => {
      const rules = await chartRules(ipam, egress);
      const cached = cachedBy(ipam, egress);
      assert.ok(!cached.includes('coil.cybozu.com/blockrequests'), 'BlockRequests are not cached (watched)');
      assert.deepEqual(granted(rules, 'watch'), cached);
      assert.deepEqual(granted(rules, 'list'), [...cached, ...(ipam ? ['coil.cybozu.com/blockrequests'] : [])].sort());
    });
  }
});
