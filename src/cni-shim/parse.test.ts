import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { DEFAULT_SOCKET, IS_CHAINED_KEY, parseCniArgs, parseRequest, peekCniVersion, type ShimRequest } from './parse.js';
import { PluginError } from './plugin-error.js';

const CID = '3764257de70aaf34369dcb034d81869176c6c2938b3ee4c78f518ec96cc759d9';
const ENV = {
  CNI_COMMAND: 'ADD',
  CNI_CONTAINERID: CID,
  CNI_NETNS: '/var/run/netns/cni-1',
  CNI_IFNAME: 'eth0',
  CNI_PATH: '/opt/cni/bin',
  CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=${CID};K8S_POD_UID=u-1`,
};
const conf = (extra: Record<string, unknown> = {}): Buffer =>
  Buffer.from(JSON.stringify({ cniVersion: '1.0.0', name: 'k8s-pod-network', type: 'coil', ...extra }));

/** Asserts that `fn` throws a PluginError with CNI `code` and returns it. */
function throwsCode(fn: () => unknown, code: number): PluginError {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof PluginError, `expected PluginError, got ${String(err)}`);
    assert.equal(err.code, code, err.message);
    return err;
  }
  assert.fail(`expected CNI error ${code}`);
}

function call(req: ShimRequest): Exclude<ShimRequest, { command: 'VERSION' }> {
  assert.notEqual(req.command, 'VERSION');
  return req as Exclude<ShimRequest, { command: 'VERSION' }>;
}

describe('parseRequest', () => {
  it('ADD maps the environment and netconf to CNIArgs', () => {
    const stdin = conf();
    const req = call(parseRequest(ENV, stdin));
    assert.equal(req.command, 'ADD');
    assert.equal(req.cniVersion, '1.0.0');
    assert.equal(req.socketPath, DEFAULT_SOCKET);
    assert.equal(req.prevResult, undefined);
    assert.deepEqual(req.args, {
      containerId: CID,
      netns: '/var/run/netns/cni-1',
      ifname: 'eth0',
      args: { K8S_POD_NAMESPACE: 'default', K8S_POD_NAME: 'web-0', K8S_POD_INFRA_CONTAINER_ID: CID, K8S_POD_UID: 'u-1' },
      path: '/opt/cni/bin',
      stdinData: stdin,
      ips: [],
      interfaces: {},
      validAttachments: [],
    });
  });

  it('the netconf socket key overrides the default socket', () => {
    assert.equal(call(parseRequest(ENV, conf({ socket: '/tmp/c.sock' }))).socketPath, '/tmp/c.sock');
  });

  it('VERSION needs neither other variables nor stdin', () => {
    assert.deepEqual(parseRequest({ CNI_COMMAND: 'VERSION' }, Buffer.from('garbage')), { command: 'VERSION' });
  });

  it('missing CNI_NETNS on ADD is code 4', () => {
    const e = throwsCode(() => parseRequest({ ...ENV, CNI_NETNS: undefined }, conf()), 4);
    assert.match(e.message, /CNI_NETNS/);
  });

  it('missing CNI_CONTAINERID on DEL is code 4', () => {
    throwsCode(() => parseRequest({ ...ENV, CNI_COMMAND: 'DEL', CNI_CONTAINERID: '' }, conf()), 4);
  });

  it('DEL without CNI_NETNS is accepted (the netns may be gone)', () => {
    assert.equal(call(parseRequest({ ...ENV, CNI_COMMAND: 'DEL', CNI_NETNS: undefined }, conf())).args.netns, '');
  });

  it('an unknown CNI_COMMAND is code 4', () => {
    throwsCode(() => parseRequest({ ...ENV, CNI_COMMAND: 'FROB' }, conf()), 4);
    throwsCode(() => parseRequest({ ...ENV, CNI_COMMAND: 'toString' }, conf()), 4);
  });

  it('a container id with invalid characters is code 4', () => {
    throwsCode(() => parseRequest({ ...ENV, CNI_CONTAINERID: '../etc' }, conf()), 4);
  });

  it('an interface name longer than 15 bytes is code 4', () => {
    throwsCode(() => parseRequest({ ...ENV, CNI_IFNAME: 'eth0123456789012' }, conf()), 4);
  });

  it('garbage on stdin is code 6', () => {
    throwsCode(() => parseRequest(ENV, Buffer.from('{not json')), 6);
  });

  it('a JSON non-object on stdin is code 6', () => {
    throwsCode(() => parseRequest(ENV, Buffer.from('[1,2]')), 6);
  });

  it('an unknown cniVersion is code 1', () => {
    const e = throwsCode(() => parseRequest(ENV, conf({ cniVersion: '0.2.0' })), 1);
    assert.match(e.details, /0\.2\.0/);
  });

  it('GC with a cniVersion below 1.1.0 is code 1', () => {
    throwsCode(() => parseRequest({ CNI_COMMAND: 'GC', CNI_PATH: '/opt/cni/bin' }, conf({ cniVersion: '1.0.0' })), 1);
  });

  it('a missing cniVersion is code 7', () => {
    throwsCode(() => parseRequest(ENV, Buffer.from('{"name":"n"}')), 7);
  });

  it('a missing network name is code 7', () => {
    throwsCode(() => parseRequest(ENV, conf({ name: '' })), 7);
  });

  it('a non-string socket is code 7', () => {
    throwsCode(() => parseRequest(ENV, conf({ socket: 42 })), 7);
  });

  it('a malformed prevResult is code 7', () => {
    throwsCode(() => parseRequest(ENV, conf({ prevResult: { ips: 'x' } })), 7);
  });

  it('bad CNI_ARGS is code 4', () => {
    throwsCode(() => parseRequest({ ...ENV, CNI_ARGS: 'K8S_POD_NAME' }, conf()), 4);
  });

  it('prevResult becomes ips without prefix, interfaces with sandbox flags, and IS_CHAINED', () => {
    const prevResult = {
      cniVersion: '1.0.0',
      interfaces: [{ name: 'veth1' }, { name: 'eth0', sandbox: '/var/run/netns/cni-1' }],
      ips: [{ address: '10.1.0.5/24', interface: 1 }, { address: 'fd00::5/64', interface: 1 }],
    };
    const req = call(parseRequest(ENV, conf({ prevResult })));
    assert.deepEqual(req.prevResult, prevResult);
    assert.deepEqual(req.args.ips, ['10.1.0.5', 'fd00::5']);
    assert.deepEqual(req.args.interfaces, { veth1: false, eth0: true });
    assert.equal(req.args.args[IS_CHAINED_KEY], 'true');
  });

  it('GC carries cni.dev/valid-attachments and needs only CNI_PATH', () => {
    const stdin = conf({ cniVersion: '1.1.0', 'cni.dev/valid-attachments': [{ containerID: 'c1', ifname: 'eth0' }] });
    const req = call(parseRequest({ CNI_COMMAND: 'GC', CNI_PATH: '/opt/cni/bin' }, stdin));
    assert.deepEqual(req.args.validAttachments, [{ containerId: 'c1', ifname: 'eth0' }]);
  });

  it('malformed valid-attachments is code 7', () => {
    const stdin = conf({ cniVersion: '1.1.0', 'cni.dev/valid-attachments': [{ containerID: 1 }] });
    throwsCode(() => parseRequest({ CNI_COMMAND: 'GC', CNI_PATH: '/opt/cni/bin' }, stdin), 7);
  });

  it('STATUS needs only CNI_PATH and cniVersion 1.1.0', () => {
    const req = call(parseRequest({ CNI_COMMAND: 'STATUS', CNI_PATH: '/opt/cni/bin' }, conf({ cniVersion: '1.1.0' })));
    assert.equal(req.command, 'STATUS');
  });
});

describe('parseCniArgs', () => {
  it('forwards the K8S_* keys', () => {
    assert.deepEqual(parseCniArgs('K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p'), { K8S_POD_NAMESPACE: 'ns', K8S_POD_NAME: 'p' });
  });

  it('an empty CNI_ARGS is no args', () => {
    assert.deepEqual(parseCniArgs(''), {});
  });

  it('unknown keys are code 4 without IgnoreUnknown', () => {
    throwsCode(() => parseCniArgs('K8S_POD_NAME=p;FOO=bar'), 4);
  });

  it('unknown keys are dropped with IgnoreUnknown=true', () => {
    assert.deepEqual(parseCniArgs('IgnoreUnknown=true;FOO=bar;K8S_POD_NAME=p'), { K8S_POD_NAME: 'p' });
  });

  it('a pair with two "=" is code 4', () => {
    throwsCode(() => parseCniArgs('K8S_POD_NAME=a=b'), 4);
  });

  it('a non-boolean IgnoreUnknown is code 4', () => {
    throwsCode(() => parseCniArgs('IgnoreUnknown=maybe'), 4);
  });
});

describe('peekCniVersion', () => {
  it('reads the netconf version, and falls back to 1.1.0 on garbage', () => {
    assert.equal(peekCniVersion(conf({ cniVersion: '0.4.0' })), '0.4.0');
    assert.equal(peekCniVersion(Buffer.from('nope')), '1.1.0');
  });
});
