import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseConntrack } from './conntrack.js';

// `conntrack -L -o extended` (conntrack-tools 1.4.7) in a NAT netns, 2026-11-27; the summary line
// goes to stderr.
const OUTPUT = `ipv4     2 tcp      6 431999 ESTABLISHED src=10.50.0.2 dst=198.51.100.2 sport=55058 dport=8080 src=198.51.100.2 dst=198.51.100.1 sport=8080 dport=55058 [ASSURED] mark=0 use=1
ipv4     2 icmp     1 29 src=10.50.0.2 dst=198.51.100.2 type=8 code=0 id=731 src=198.51.100.2 dst=198.51.100.1 type=0 code=0 id=731 mark=0 use=1
ipv4     2 udp      17 29 src=10.50.0.2 dst=198.51.100.2 sport=43386 dport=9001 [UNREPLIED] src=198.51.100.2 dst=198.51.100.1 sport=9001 dport=43386 mark=0 use=1
ipv6     10 tcp      6 117 TIME_WAIT src=fd50::2 dst=fd98::2 sport=1 dport=2 src=fd98::2 dst=fd98::1 sport=2 dport=1 [ASSURED] mark=0 zone=3 use=1
garbage
`;

test('conntrack -L -o extended: family, protocol, timeout, state, both tuples, flags', () => {
  const [tcp, icmp, udp, tcp6, ...rest] = parseConntrack(OUTPUT);
  assert.deepEqual(rest, []);
  assert.deepEqual(tcp, { family: 4, protocol: 'tcp', timeoutS: 431999, state: 'ESTABLISHED', isUnreplied: false, isAssured: true,
    original: { src: '10.50.0.2', dst: '198.51.100.2', sport: 55058, dport: 8080 }, reply: { src: '198.51.100.2', dst: '198.51.100.1', sport: 8080, dport: 55058 } });
  assert.deepEqual(icmp, { family: 4, protocol: 'icmp', timeoutS: 29, isUnreplied: false, isAssured: false,
    original: { src: '10.50.0.2', dst: '198.51.100.2' }, reply: { src: '198.51.100.2', dst: '198.51.100.1' } });
  assert.equal(udp!.isUnreplied, true);
  assert.deepEqual(udp!.reply, { src: '198.51.100.2', dst: '198.51.100.1', sport: 9001, dport: 43386 });
  assert.deepEqual({ family: tcp6!.family, state: tcp6!.state, replyDst: tcp6!.reply.dst }, { family: 6, state: 'TIME_WAIT', replyDst: 'fd98::1' });
});
