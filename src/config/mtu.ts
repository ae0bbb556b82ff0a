// The pod MTU the node agent computed (underlay MTU minus the largest
// encapsulation overhead of the pools in use), for ADDs whose netconf sets no
// `mtu`. A missing or unreadable file means "the kernel default", as before the
// agent ran: a pod then still works on Never/Never pools.
import { readFileSync } from 'node:fs';

function readPodMtu(file: string): number | undefined {
  let text: string;
  try {
    text = readFileSync(file, 'utf8').trim();
  } catch {
    return undefined;
  }
  const n = Number(text);
  return Number.isInteger(n) && n >= 68 && n <= 65535 ? n : undefined;
}

/** The netconf's `mtu`, else the agent's file. */
export function podMtu(conf: { mtu?: number | undefined; mtu_file: string }): number | undefined {
  return conf.mtu ?? readPodMtu(conf.mtu_file);
}
