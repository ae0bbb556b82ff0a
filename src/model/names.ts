// Resource names for IPAM objects. They must be valid Kubernetes object names
// (lower-case alphanumerics, '-' and '.'), and the etcd backend derives its keys
// (/netplugin/ipam/v2/assignment/ipv4/block/10.0.0.0-26,
//  /netplugin/ipam/v2/host/<node>/ipv4/block/10.0.0.0-26) from them.

/** `10.0.0.0/26` -> `10.0.0.0-26`; `fd00::40/122` -> `fd00--40-122` */
export function blockName(cidr: string): string {
  return cidr.toLowerCase().replace(/[/:]/g, '-');
}

export function familyOf(cidr: string): 4 | 6 {
  return cidr.includes(':') ? 6 : 4;
}

/** `<node>-ipv4-10.0.0.0-26`: parseable from the right, since block names never contain `-ipv4-`/`-ipv6-`. */
export function affinityName(node: string, cidr: string): string {
  return `${node}-ipv${familyOf(cidr)}-${blockName(cidr)}`;
}

export function parseAffinityName(name: string): { node: string; family: 4 | 6; block: string } | undefined {
  const m = /^(.+)-ipv([46])-([0-9a-f.-]+)$/.exec(name);
  if (!m) return undefined;
  return { node: m[1]!, family: Number(m[2]) as 4 | 6, block: m[3]! };
}

/** Block names encode the family: IPv6 ones contain `--` or more than one `-`. */
export function blockFamily(name: string): 4 | 6 {
  return /^\d+\.\d+\.\d+\.\d+-\d+$/.test(name) ? 4 : 6;
}


/**
 * WorkloadEndpoint names: `<node>-<orchestrator>-<workload>-<endpoint>` with
 * every '-' inside a part doubled (workload/workload.ts builds them; this splits
 * them back: `node--1-k8s-web--0-eth0` -> node-1, k8s, web-0, eth0).
 */
/**
 * `<node>-<orchestrator>-<workload>-<ifname>` with every '-' inside a part
 * doubled, so the name splits back unambiguously on single dashes
 * (node `a-b`, pod `c` -> `a--b-k8s-c-eth0`). Workload: the pod name for k8s,
 * the container ID for plain CNI.
 */
export function workloadEndpointName(node: string, orchestrator: 'k8s' | 'cni' | string, workload: string, ifname: string): string {
  return [node, orchestrator, workload, ifname].map((p) => p.replace(/-/g, '--')).join('-');
}


export function parseWorkloadEndpointName(name: string): { node: string; orchestrator: string; workload: string; endpoint: string } | undefined {
  // '--' is an escaped '-' inside a part; a single '-' separates parts.
  const parts: string[] = [];
  let cur = '';
  for (let i = 0; i < name.length; i++) {
    const ch = name[i]!;
    if (ch !== '-') {
      cur += ch;
    } else if (name[i + 1] === '-') {
      cur += '-';
      i++;
    } else {
      parts.push(cur);
      cur = '';
    }
  }
  parts.push(cur);
  if (parts.length !== 4 || parts.some((p) => p === '')) return undefined;
  const [node, orchestrator, workload, endpoint] = parts as [string, string, string, string];
  return { node, orchestrator, workload, endpoint };
}
