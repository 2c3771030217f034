/**
 * Drives the `coil` CNI executable on a lab node as containerd does, for benchmarks that need more
 * pod attachments than kubelet can start on this machine in reasonable time (a real pod costs
 * ≈ 0.2 s of containerd and runc work; an ADD ≈ 10 ms).
 *
 * One shell runs inside the node (its mount and network namespaces: hack/lab/node-host.ts) for
 * the driver's whole life and reads one request a line from stdin: for an ADD it makes the pod's
 * network namespace (`ip netns add`, under the node's /run/netns, which coild sees through its
 * /run hostPath as it sees containerd's), then execs the node's `/opt/cni/bin/coil` (what the
 * chart's init container installed) with the CNI_* environment and the netconf on stdin; for a
 * DEL it calls coil, then deletes the namespace, as a runtime does. It answers one line per
 * request with the exit status and the call's wall time (bash `$EPOCHREALTIME` around the exec).
 *
 * What is not a runtime's: the sandbox is an empty network namespace (no pause process), and the
 * caller must make the Pod object the ADD names (coild reads it).
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { createInterface, type Interface } from 'node:readline';
import { readdir, readFile } from 'node:fs/promises';
import { once } from 'node:events';
import type { KubeNode } from './kube-node.js';

/** The shell run inside the node: `CMD NAMESPACE NAME ID` a line in, `ID RC MS OUTPUT` a line out. */
const SCRIPT = [
  'while read -r cmd namespace name id; do',
  '  ns="fp-${id:0:12}"',
  '  [ "$cmd" = ADD ] && ip netns add "$ns"',
  '  t0=$EPOCHREALTIME',
  '  out=$(CNI_COMMAND=$cmd CNI_CONTAINERID=$id CNI_NETNS=/run/netns/$ns CNI_IFNAME=eth0 CNI_PATH=/opt/cni/bin \\',
  '    CNI_ARGS="IgnoreUnknown=1;K8S_POD_NAMESPACE=$namespace;K8S_POD_NAME=$name;K8S_POD_INFRA_CONTAINER_ID=$id" \\',
  '    /opt/cni/bin/coil <<<"$NETCONF" 2>&1)',
  '  rc=$?',
  '  t1=$EPOCHREALTIME',
  '  [ "$cmd" = DEL ] && ip netns del "$ns" 2>/dev/null',
  '  printf \'%s %s %s %s\\n\' "$id" "$rc" "$(( ${t1/./} - ${t0/./} ))" "$(printf \'%s\' "$out" | tr \'\\n\' \' \')"',
  'done',
].join('\n');

/** One CNI call's outcome. */
export interface CniCall {
  readonly code: number;
  /** Wall time of the exec, ms. */
  readonly ms: number;
  /** stdout and stderr of coil, on one line. */
  readonly output: string;
}

/** The coil plugin's netconf from the node's conflist (the first plugin), as libcni passes it. */
export async function coilNetconf(node: KubeNode): Promise<string> {
  const dir = node.host.hostPath('/etc/cni/net.d');
  const name = (await readdir(dir)).filter((f) => f.endsWith('.conflist')).sort()[0];
  if (!name) throw new Error(`no conflist in ${dir} on ${node.name}`);
  const list = JSON.parse(await readFile(`${dir}/${name}`, 'utf8')) as { cniVersion: string; name: string; plugins: Record<string, unknown>[] };
  const coil = list.plugins.find((p) => p.type === 'coil');
  if (!coil) throw new Error(`${name} on ${node.name} has no coil plugin`);
  return JSON.stringify({ cniVersion: list.cniVersion, name: list.name, ...coil });
}

/** A shell inside a node calling coil, one call at a time. */
export class CniDriver {
  private readonly waiting = new Map<string, { resolve: (c: CniCall) => void; reject: (e: Error) => void }>();
  private stderr = '';
  private readonly lines: Interface;
  private chain: Promise<unknown> = Promise.resolve();

  private constructor(private readonly child: ChildProcessWithoutNullStreams) {
    this.lines = createInterface({ input: child.stdout });
    this.lines.on('line', (line) => {
      const [id, rc, us, ...rest] = line.split(' ');
      this.waiting.get(id!)?.resolve({ code: Number(rc), ms: Number(us) / 1000, output: rest.join(' ') });
      this.waiting.delete(id!);
    });
    child.stderr.on('data', (d: Buffer) => (this.stderr = (this.stderr + d.toString()).slice(-2000)));
    child.on('exit', (code) => {
      for (const w of this.waiting.values()) w.reject(new Error(`the CNI driver's shell exited (${code}): ${this.stderr.trim()}`));
      this.waiting.clear();
    });
  }

  /** Starts the shell on `node`, with the coil plugin's netconf read from the node's conflist. */
  static async start(node: KubeNode): Promise<CniDriver> {
    const netconf = await coilNetconf(node);
    const [command, ...args] = node.host.argv(['bash', '-c', SCRIPT]);
    const child = spawn(command!, args, { env: { ...process.env, NETCONF: netconf }, stdio: ['pipe', 'pipe', 'pipe'] });
    return new CniDriver(child);
  }

  /** Runs one CNI call for pod `namespace/name` with sandbox `id` (64 hex digits); calls run in order. */
  call(command: 'ADD' | 'DEL', namespace: string, name: string, id: string): Promise<CniCall> {
    const run = (): Promise<CniCall> => new Promise((resolve, reject) => {
      if (this.child.exitCode !== null) return reject(new Error(`the CNI driver's shell exited (${this.child.exitCode})`));
      this.waiting.set(id, { resolve, reject });
      this.child.stdin.write(`${command} ${namespace} ${name} ${id}\n`);
    });
    const p = this.chain.then(run, run);
    this.chain = p.catch(() => undefined);
    return p;
  }

  /** Ends the shell (EOF on its stdin). */
  async stop(): Promise<void> {
    if (this.child.exitCode !== null) return;
    this.child.stdin.end();
    await once(this.child, 'exit');
    this.lines.close();
  }
}
