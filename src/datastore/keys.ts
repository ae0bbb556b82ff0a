// Where each kind lives: the Kubernetes plural (CRD resource name) and the etcd
// key layout. Both backends and the CLI use this one table.
import { DatastoreError } from '../errors.js';
import { NAMESPACED_KINDS, type Kind, type Resource } from '../model/resources.js';
import { blockFamily, parseAffinityName } from '../model/names.js';

export const PLURALS: Readonly<Record<Kind, string>> = {
  IPPool: 'ippools',
  IPAMBlock: 'ipamblocks',
  BlockAffinity: 'blockaffinities',
  IPAMHandle: 'ipamhandles',
  IPAMConfig: 'ipamconfigs',
  WorkloadEndpoint: 'workloadendpoints',
  ClusterInformation: 'clusterinformations',
  Node: 'nodes',
  HostEndpoint: 'hostendpoints',
  KubeControllersConfiguration: 'kubecontrollersconfigurations',
  AgentConfiguration: 'agentconfigurations',
  Profile: 'profiles',
  NetworkPolicy: 'networkpolicies',
  GlobalNetworkPolicy: 'globalnetworkpolicies',
  BGPConfiguration: 'bgpconfigurations',
  BGPPeer: 'bgppeers',
  StagedNetworkPolicy: 'stagednetworkpolicies',
  StagedGlobalNetworkPolicy: 'stagedglobalnetworkpolicies',
  StagedKubernetesNetworkPolicy: 'stagedkubernetesnetworkpolicies',
};

export const KINDS = Object.keys(PLURALS) as Kind[];

export function isKind(s: string): s is Kind {
  return Object.hasOwn(PLURALS, s);
}

export const RESOURCE_PREFIX = '/netplugin/resources/v3/netplugin.org/';
const IPAM_PREFIX = '/netplugin/ipam/v2/';

function invalidName(kind: Kind, name: string, why: string): DatastoreError {
  return new DatastoreError('Invalid', `${kind} name ${JSON.stringify(name)} is invalid: ${why}`);
}

/** Names become path segments (etcd keys, URL paths): no '/' and not empty. */
export function checkName(kind: Kind, name: string): void {
  if (!name || name.includes('/') || name === '.' || name === '..') {
    throw invalidName(kind, name, 'a name must be non-empty and must not contain "/"');
  }
}

/** The etcd key of one object. */
export function etcdKey(kind: Kind, name: string, namespace?: string): string {
  checkName(kind, name);
  switch (kind) {
    case 'IPAMBlock':
      return `${IPAM_PREFIX}assignment/ipv${blockFamily(name)}/block/${name}`;
    case 'BlockAffinity': {
      const a = parseAffinityName(name);
      if (!a)
        throw invalidName(kind, name, 'expected <node>-ipv4-<block> or <node>-ipv6-<block> (names.ts affinityName)');
      return `${IPAM_PREFIX}host/${a.node}/ipv${a.family}/block/${a.block}`;
    }
    case 'IPAMHandle':
      return `${IPAM_PREFIX}handle/${name}`;
    case 'IPAMConfig':
      if (name !== 'default') throw invalidName(kind, name, 'IPAMConfig is a singleton named "default"');
      return `${IPAM_PREFIX}config`;
    default:
      if (NAMESPACED_KINDS.has(kind)) {
        const ns = namespace || 'default';
        if (ns.includes('/'))
          throw new DatastoreError('Invalid', `namespace ${JSON.stringify(ns)} is invalid: it must not contain "/"`);
        return `${RESOURCE_PREFIX}${PLURALS[kind]}/${ns}/${name}`;
      }
      return `${RESOURCE_PREFIX}${PLURALS[kind]}/${name}`;
  }
}

/**
 * The object an etcd key of `kind` holds (the inverse of etcdKey), read from
 * the key alone: a malformed value is named by where it is stored.
 */
export function etcdKeyIdentity(kind: Kind, key: string): { name: string; namespace?: string } | undefined {
  const rest = (prefix: string) => (key.startsWith(prefix) ? key.slice(prefix.length) : undefined);
  switch (kind) {
    case 'IPAMBlock': {
      const m = /^ipv[46]\/block\/([^/]+)$/.exec(rest(`${IPAM_PREFIX}assignment/`) ?? '');
      return m ? { name: m[1]! } : undefined;
    }
    case 'BlockAffinity': {
      const m = /^(.+)\/ipv([46])\/block\/([^/]+)$/.exec(rest(`${IPAM_PREFIX}host/`) ?? '');
      return m ? { name: `${m[1]}-ipv${m[2]}-${m[3]}` } : undefined;
    }
    case 'IPAMHandle': {
      const n = rest(`${IPAM_PREFIX}handle/`);
      return n ? { name: n } : undefined;
    }
    case 'IPAMConfig':
      return key === `${IPAM_PREFIX}config` ? { name: 'default' } : undefined;
    default: {
      const parts = (rest(`${RESOURCE_PREFIX}${PLURALS[kind]}/`) ?? '').split('/');
      if (NAMESPACED_KINDS.has(kind))
        return parts.length === 2 && parts[0] && parts[1] ? { namespace: parts[0], name: parts[1] } : undefined;
      return parts.length === 1 && parts[0] ? { name: parts[0] } : undefined;
    }
  }
}

/**
 * The narrowest etcd key prefix that holds every object of `kind` matching
 * namespace/namePrefix; callers still filter names client-side.
 */
export function etcdListPrefix(kind: Kind, namespace?: string, namePrefix = ''): string {
  switch (kind) {
    case 'IPAMBlock':
      return `${IPAM_PREFIX}assignment/`;
    case 'BlockAffinity': {
      // The block part of an affinity name is [0-9a-f.-] only, so a prefix that
      // already contains "-ipv4-"/"-ipv6-" names exactly one node.
      const m = /^(.+)-ipv([46])-([0-9a-f.-]*)$/.exec(namePrefix);
      if (m && !m[1]!.includes('/')) return `${IPAM_PREFIX}host/${m[1]}/ipv${m[2]}/block/${m[3]}`;
      return `${IPAM_PREFIX}host/`;
    }
    case 'IPAMHandle':
      return `${IPAM_PREFIX}handle/${namePrefix.includes('/') ? '' : namePrefix}`;
    case 'IPAMConfig':
      return `${IPAM_PREFIX}config`;
    default: {
      const base = `${RESOURCE_PREFIX}${PLURALS[kind]}/`;
      const safePrefix = namePrefix.includes('/') ? '' : namePrefix;
      if (NAMESPACED_KINDS.has(kind)) return namespace !== undefined ? `${base}${namespace}/${safePrefix}` : base;
      return `${base}${safePrefix}`;
    }
  }
}

/**
 * The `node` list option (types.ts ListOptions): whether `o` belongs to that
 * node. Only WorkloadEndpoints carry a node a list can filter on; any other
 * kind is refused rather than silently listed whole.
 */
export function onNode(kind: Kind, node: string | undefined): (o: Resource) => boolean {
  if (node === undefined) return () => true;
  if (kind !== 'WorkloadEndpoint')
    throw new DatastoreError('Invalid', `list option node applies to WorkloadEndpoint only, not ${kind}`);
  return (o) => (o as Resource<'WorkloadEndpoint'>).spec.node === node;
}
