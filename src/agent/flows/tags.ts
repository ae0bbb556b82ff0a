// Flow-log tags: the NFLOG prefix the policy table writes on the rule that
// decides a new connection (allowed) or a packet (denied), and how the agent
// reads it back. A tag carries no tenant text: policies and profiles are named
// by a short hash (the same hash their chain names carry), and the agent keeps
// the table hash → {kind, namespace, name} the compiler filled. The action,
// direction and rule index are written as they are, so `nft list` and a raw
// `nflog` capture stay readable:
//
//   np1 A I 3 2f1c0e9a7b11   Allow, ingress, rule 3 of the policy whose ref is 2f1c...
//   np1 D E -1 eop           Deny, egress, end of policies (no policy rule matched)
//
// At most FLOW_TAG_MAX_BYTES (the kernel holds 127): 4 + 2 + 2 + 7 + 12 bytes.
import { END_OF_PROFILES_HIT, END_OF_TIER_HIT, type PolicyHit } from '../../model/policy-hit.js';

const FLOW_TAG_VERSION = 'np1';
/** The refs of the end-of-policies drop (EndOfTier) and of the end-of-profiles drop. */
export const REF_END_OF_POLICIES = 'eop';
export const REF_END_OF_PROFILES = 'eopr';

/** Default NFLOG group of the flow-log rules. */
export const DEFAULT_FLOW_LOG_GROUP = 22;

export type TagAction = 'Allow' | 'Deny';
export type TagDir = 'ingress' | 'egress';

interface FlowTag {
  action: TagAction;
  dir: TagDir;
  /** The rule's index in its policy or profile; -1 for an end-of-policies or end-of-profiles drop. */
  ruleIndex: number;
  ref: string;
}

/** What a ref names: its hit without action and rule index (src/model/staged.ts hitOfPolicy names policies). */
export type TagRef = Omit<PolicyHit, 'action' | 'ruleIndex'>;

export function formatFlowTag(t: FlowTag): string {
  const a = t.action === 'Allow' ? 'A' : 'D';
  return `${FLOW_TAG_VERSION} ${a} ${t.dir === 'ingress' ? 'I' : 'E'} ${t.ruleIndex} ${t.ref}`;
}

const TAG = /^np1 ([AD]) ([IE]) (-1|\d{1,6}) ([a-z0-9]{1,16})$/;

/** A prefix read from NFLOG as a tag; undefined for anything else (another rule's log line). */
export function parseFlowTag(prefix: string): FlowTag | undefined {
  const m = TAG.exec(prefix);
  if (!m) return undefined;
  const dir = m[2] === 'I' ? 'ingress' : 'egress';
  return { action: m[1] === 'A' ? 'Allow' : 'Deny', dir, ruleIndex: Number(m[3]), ref: m[4]! };
}

/** The hit a tag stands for, through the ref table; undefined for an unknown ref (a table older than the agent). */
export function hitOfTag(t: FlowTag, refs: ReadonlyMap<string, TagRef>): PolicyHit | undefined {
  if (t.ref === REF_END_OF_POLICIES) return { ...END_OF_TIER_HIT };
  if (t.ref === REF_END_OF_PROFILES) return { ...END_OF_PROFILES_HIT };
  const r = refs.get(t.ref);
  return r ? { ...r, action: t.action, ruleIndex: t.ruleIndex } : undefined;
}
