import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ConfigError, parseConfig, parseDuration } from './config.js';

const env = { COIL_NODE_NAME: 'n1' };

describe('coild config', () => {
  it("defaults are Coil's (ports, tables, socket, GC interval) plus ours", () => {
    const c = parseConfig([], env);
    assert.deepEqual(
      [c.metricsAddr?.port, c.healthAddr?.port, c.podTableId, c.podRulePrio, c.exportTableId, c.protocolId, c.socketPath, c.gcIntervalMs, c.clearRoutesOnShutdown],
      [9384, 9385, 116, 2000, 119, 30, '/run/coild.sock', 300_000, false],
    );
    assert.deepEqual([c.coolingMs, c.blockReleaseGraceMs, c.lowWaterMark], [30_000, 60_000, 8]);
    assert.deepEqual([c.spawnHelper, c.netlinkAgent], [undefined, true]);
    assert.deepEqual([parseConfig(['--spawn-helper=true'], env).spawnHelper, parseConfig(['--spawn-helper'], env).spawnHelper, parseConfig(['--spawn-helper=false'], env).spawnHelper], [true, true, false]);
  });

  it('takes Go-style booleans and durations', () => {
    const c = parseConfig(['--clear-routes-on-shutdown=true', '--cooling-period=1m30s', '--addressblock-gc-interval', '10s', '--low-water-mark=0'], env);
    assert.deepEqual([c.clearRoutesOnShutdown, c.coolingMs, c.gcIntervalMs, c.lowWaterMark], [true, 90_000, 10_000, 0]);
    assert.equal(parseConfig(['--clear-routes-on-shutdown'], env).clearRoutesOnShutdown, true);
    assert.equal(parseConfig(['--clear-routes-on-shutdown=false'], env).clearRoutesOnShutdown, false);
    assert.equal(parseDuration('250ms'), 250);
    assert.equal(parseConfig(['--netlink-agent=false'], env).netlinkAgent, false);
    assert.deepEqual([parseConfig([], env).secureEndpoints, parseConfig(['--secure-endpoints=false'], env).secureEndpoints], [true, false]);
  });

  it("accepts the chart's argument list, egress flags included", () => {
    const c = parseConfig(['--metrics-addr=:9384', '--health-addr=:9385', '--socket=/run/coild.sock', '--enable-ipam=true', '--enable-egress=false', '--egress-port=5555', '--addressblock-gc-interval=5m', '--cooling-period=30s', '--block-release-grace=1m', '--clear-routes-on-shutdown=false', '--log-level=info'], env);
    assert.equal(c.clearRoutesOnShutdown, false);
    assert.equal(c.logLevel, 'info');
  });

  it("--enable-originating-only and --backend as Coil's (default off, iptables); a bad backend or an unimplemented Coil switch is refused", () => {
    assert.deepEqual([parseConfig([], env).enableOriginatingOnly, parseConfig([], env).backend], [false, 'iptables']);
    const c = parseConfig(['--enable-originating-only=true', '--backend=nftables'], env);
    assert.deepEqual([c.enableOriginatingOnly, c.backend], [true, 'nftables']);
    assert.equal(parseConfig(['--enable-originating-only'], env).enableOriginatingOnly, true);
    assert.throws(() => parseConfig(['--backend=pf'], env), /--backend: expected "iptables" or "nftables", got "pf"/);
    assert.throws(() => parseConfig(['--compat-calico=true'], env), /--compat-calico is not supported/);
    assert.throws(() => parseConfig(['--register-from-main'], env), /--register-from-main is not supported/);
    assert.equal(parseConfig(['--compat-calico=false'], env).enableIpam, true);
  });

  it('refuses a missing COIL_NODE_NAME, unknown flags and bad values', () => {
    assert.throws(() => parseConfig([], {}), /COIL_NODE_NAME/);
    assert.throws(() => parseConfig(['--nope'], env), ConfigError);
    assert.throws(() => parseConfig(['--protocol-id=300'], env), /protocol-id/);
    assert.throws(() => parseConfig(['--cooling-period=soon'], env), /invalid duration/);
    assert.equal(parseConfig(['--enable-ipam=false'], env).enableIpam, false);
    assert.equal(parseConfig([], env).enableIpam, true);
    assert.throws(() => parseConfig(['--enable-ipam=false', '--enable-egress=false'], env), /both false: nothing to run/);
  });
});
